#!/usr/bin/env node
// Load generator for `doppler serve` (or any OpenAI-compatible server): N concurrent clients
// stream completions of fixed prompts and it reports time to first token and inter-token latency
// (p50 / p99), requests/s and aggregate output tokens/s, the way vLLM's serving benchmark and
// llama.cpp's server bench do. Needs Node 18 or later and nothing else.
//
//   node bench/serve/serve_bench.mjs --url http://127.0.0.1:8080 --clients 32 --requests 128 \
//        --prompt-tokens 128 --max-tokens 128 [--text] [--api-key KEY] [--json]
//
// Prompts are token ids sent to /v1/completions (a synthetic model has no tokenizer), drawn from a
// fixed generator so every run sends the same ones; --text sends words instead. ignore_eos keeps
// every request generating exactly --max-tokens.
import {parseArgs} from 'node:util';

const {values: opt} = parseArgs({
  options: {
    url: {type: 'string', default: 'http://127.0.0.1:8080'},
    clients: {type: 'string', default: '8'},
    requests: {type: 'string', default: ''},
    'prompt-tokens': {type: 'string', default: '128'},
    'max-tokens': {type: 'string', default: '128'},
    'id-range': {type: 'string', default: '1000'},
    text: {type: 'boolean', default: false},
    'api-key': {type: 'string', default: ''},
    json: {type: 'boolean', default: false},
    help: {type: 'boolean', default: false},
  },
});
if (opt.help) {
  console.log('usage: serve_bench.mjs [--url URL] [--clients N] [--requests N (default 4 x clients)] [--prompt-tokens N]\n' +
              '                       [--max-tokens N] [--id-range N] [--text] [--api-key KEY] [--json]');
  process.exit(0);
}
const positive = (name) => {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < 1) {
    console.error(`serve_bench: --${name} must be a positive integer, not '${opt[name]}'`);
    process.exit(2);
  }
  return v;
};
const clients = positive('clients');
const requests = opt.requests ? positive('requests') : 4 * clients;
const promptTokens = positive('prompt-tokens');
const maxTokens = positive('max-tokens');
const idRange = positive('id-range');

// A fixed pseudo-random sequence (xorshift32), so that runs send identical prompts.
function promptFor(i) {
  let s = (i + 1) * 2654435761 >>> 0;
  const next = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s; };
  const words = ['and', 'the', 'of', 'light', 'water', 'said', 'made', 'day', 'earth', 'heaven'];
  return Array.from({length: promptTokens}, () => (opt.text ? words[next() % words.length] : 1 + (next() % (idRange - 1))));
}

const headers = {'Content-Type': 'application/json'};
if (opt['api-key']) headers.Authorization = `Bearer ${opt['api-key']}`;

// One streamed request: the arrival times of its tokens (one chunk a token) and its usage.
async function run(i) {
  const prompt = promptFor(i);
  const body = {
    prompt: opt.text ? prompt.join(' ') : prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true,
    stream: true, stream_options: {include_usage: true},
  };
  const start = performance.now();
  const res = await fetch(`${opt.url}/v1/completions`, {method: 'POST', headers, body: JSON.stringify(body)});
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let usage = null;
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, {stream: true});
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices.length && chunk.choices[0].finish_reason === null) times.push(performance.now());
    }
  }
  return {start, times, end: performance.now(), usage};
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function main() {
  await run(requests);  // warm-up (kernels, caches), not counted
  let nextRequest = 0;
  const results = [];
  const t0 = performance.now();
  await Promise.all(Array.from({length: clients}, async () => {
    while (nextRequest < requests) results.push(await run(nextRequest++));
  }));
  const seconds = (performance.now() - t0) / 1000;
  const ttft = results.map((r) => (r.times[0] - r.start) / 1000).sort((a, b) => a - b);
  const itl = results.flatMap((r) => r.times.slice(1).map((t, k) => (t - r.times[k]) / 1000)).sort((a, b) => a - b);
  const outputTokens = results.reduce((s, r) => s + (r.usage ? r.usage.completion_tokens : r.times.length), 0);
  const report = {
    url: opt.url, clients, requests, prompt_tokens: promptTokens, max_tokens: maxTokens,
    duration_s: seconds,
    requests_per_s: requests / seconds,
    output_tokens: outputTokens,
    output_tokens_per_s: outputTokens / seconds,
    ttft_p50_s: percentile(ttft, 50), ttft_p99_s: percentile(ttft, 99),
    itl_p50_s: percentile(itl, 50), itl_p99_s: percentile(itl, 99),
  };
  if (opt.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }
  const ms = (s) => `${(s * 1000).toFixed(1)} ms`;
  console.log(`${clients} clients, ${requests} requests, ${promptTokens} prompt tokens, ${maxTokens} out, ${seconds.toFixed(2)} s`);
  console.log(`requests/s            ${report.requests_per_s.toFixed(2)}`);
  console.log(`output tokens/s       ${report.output_tokens_per_s.toFixed(1)} (aggregate, ${outputTokens} tokens)`);
  console.log(`time to first token   p50 ${ms(report.ttft_p50_s)}   p99 ${ms(report.ttft_p99_s)}`);
  console.log(`inter-token latency   p50 ${ms(report.itl_p50_s)}   p99 ${ms(report.itl_p99_s)}`);
}

main().catch((e) => {
  console.error(`serve_bench: ${e.message}`);
  process.exit(1);
});
