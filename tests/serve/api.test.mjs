// doppler serve against clients nobody here wrote: OpenAI's own SDK (openai on npm) and curl.
// Runs the shipped default model on lavapipe; every request is short so the file stays within a
// couple of minutes.
import {after, before, describe, test} from 'node:test';
import assert from 'node:assert/strict';
import {execFile} from 'node:child_process';
import fs from 'node:fs';
import {promisify} from 'node:util';
import OpenAI from 'openai';
import {metrics, startServer, waitIdle} from './server.mjs';

const KEY = 'test-key-1234';
const PARALLEL = 16;
const QUEUE = 16;
const PAGE = 4;  // --kv-page: prompt prefixes are reused by whole pages
const HTTP_THREADS = 64;  // more than the storm below holds open at once
let server;
let client;

const greedy = {temperature: 0};
const user = (content) => [{role: 'user', content}];

async function chatText(content, extra = {}) {
  const r = await client.chat.completions.create({model: 'default', messages: user(content), max_tokens: 16, ...greedy, ...extra});
  return r.choices[0].message.content;
}

async function streamChat(params) {
  const stream = await client.chat.completions.create({model: 'default', stream: true, ...params});
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

// A POST with the key, its response not yet read.
function send(path, body, {headers = {}, signal} = {}) {
  return fetch(`${server.url}${path}`, {
    method: 'POST', signal, headers: {'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers}, body,
  });
}

async function post(path, body, headers = {}) {
  const r = await send(path, body, {headers});
  return {status: r.status, body: await r.json()};
}

// The server's context size, from its list of models (max_model_len, as vLLM lists it).
async function contextSize() {
  const models = await (await fetch(`${server.url}/v1/models`, {headers: {Authorization: `Bearer ${KEY}`}})).json();
  return models.data[0].max_model_len;
}

function assertErrorObject(body, status, param) {
  assert.equal(typeof body.error, 'object', JSON.stringify(body));
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, 'string');
  assert.ok('param' in body.error && 'code' in body.error);
  if (param !== undefined) assert.equal(body.error.param, param);
}

before(async () => {
  server = await startServer(['--api-key', KEY, '--parallel', String(PARALLEL), '--max-queue', String(QUEUE), '--max-body', '65536',
                              '--kv-page', String(PAGE), '--threads-http', String(HTTP_THREADS)]);
  client = new OpenAI({baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120_000});
});

after(async () => {
  if (!server) return;
  const {code} = await server.stop();
  assert.equal(code, 0, `doppler serve exited with ${code}:\n${server.log()}`);
});

describe('OpenAI SDK', () => {
  test('models and health', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, 'default-q8_0.gguf');
    assert.equal((await client.models.retrieve('default-q8_0.gguf')).max_model_len, models.data[0].max_model_len);
    await assert.rejects(client.models.retrieve('gpt-4'), (e) => e.status === 404 && e.code === 'model_not_found');
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    assert.match(server.log(), new RegExp(`listening on http://127\\.0\\.0\\.1:\\d+ \\(loading the model; ${HTTP_THREADS} HTTP threads\\)`));
  });

  test('chat: non-streaming and streaming give the same greedy text, usage and finish reason', async () => {
    const whole = await client.chat.completions.create({model: 'x', messages: user('And God said'), max_tokens: 12, ...greedy});
    assert.equal(whole.object, 'chat.completion');
    assert.equal(whole.choices.length, 1);
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.choices[0].finish_reason, 'length');
    assert.equal(whole.usage.completion_tokens, 12);
    assert.ok(whole.usage.prompt_tokens > 3);
    assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);
    assert.ok(whole.choices[0].message.content.length > 0);

    const chunks = await streamChat({messages: user('And God said'), max_tokens: 12, ...greedy, stream_options: {include_usage: true}});
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.filter((c) => c.choices.length).map((c) => c.choices[0].delta.content || '').join('');
    assert.equal(text, whole.choices[0].message.content);
    const finishes = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
    assert.equal(finishes.length, 1);
    assert.equal(finishes[0].choices[0].finish_reason, 'length');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 12);
    assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  test('streaming without include_usage has no usage chunk', async () => {
    const chunks = await streamChat({messages: user('Blessed are'), max_tokens: 4, ...greedy});
    assert.ok(chunks.every((c) => c.choices.length === 1 && !c.usage));
  });

  test('completions: text and token-id prompts, streaming and not, agree', async () => {
    const prompt = 'In the beginning God created';
    const whole = await client.completions.create({model: 'x', prompt, max_tokens: 10, ...greedy});
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.usage.completion_tokens, 10);
    const text = whole.choices[0].text;
    assert.ok(text.length > 0);

    const stream = await client.completions.create({model: 'x', prompt, max_tokens: 10, ...greedy, stream: true});
    let streamed = '';
    for await (const c of stream) streamed += c.choices[0].text;
    assert.equal(streamed, text);

    const tok = await post('/tokenize', JSON.stringify({content: prompt, add_special: true}));
    assert.equal(tok.status, 200);
    const ids = tok.body.tokens;
    assert.equal(ids.length, whole.usage.prompt_tokens, 'the text prompt is the tokenizer\'s ids with its special tokens');
    const byIds = await client.completions.create({model: 'x', prompt: ids, max_tokens: 10, ...greedy});
    assert.equal(byIds.choices[0].text, text);
    const detok = await post('/detokenize', JSON.stringify({tokens: ids}));
    assert.ok(detok.body.content.endsWith(prompt), detok.body.content);
  });

  test('max_tokens and max_completion_tokens bound the generation', async () => {
    const a = await client.chat.completions.create({model: 'x', messages: user('The LORD'), max_tokens: 3, ...greedy});
    assert.equal(a.usage.completion_tokens, 3);
    const b = await client.chat.completions.create({model: 'x', messages: user('The LORD'), max_completion_tokens: 5, ...greedy});
    assert.equal(b.usage.completion_tokens, 5);
    assert.ok(b.choices[0].message.content.startsWith(a.choices[0].message.content));
  });

  test('stop strings end the text before them, also across token boundaries and when streamed', async () => {
    const prompt = 'And the earth was';
    const free = (await client.completions.create({model: 'x', prompt, max_tokens: 32, ...greedy})).choices[0].text;
    assert.ok(free.length > 30, free);
    // A stop string that starts and ends inside words, so it spans tokens.
    const at = Math.floor(free.length / 2);
    const stop = free.slice(at, at + 5);
    const expected = free.slice(0, free.indexOf(stop));
    const r = await client.completions.create({model: 'x', prompt, max_tokens: 32, stop: [stop, 'never appears'], ...greedy});
    assert.equal(r.choices[0].text, expected);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client.completions.create({model: 'x', prompt, max_tokens: 32, stop, ...greedy, stream: true});
    let streamed = '';
    let finish = null;
    for await (const c of stream) {
      streamed += c.choices[0].text;
      finish = c.choices[0].finish_reason || finish;
    }
    assert.equal(streamed, expected);
    assert.equal(finish, 'stop');
  });

  test('the same seed gives the same text; another seed another', async () => {
    const sample = {temperature: 1.0, top_p: 1, max_tokens: 24};
    const a = await chatText('Let there be', {...sample, seed: 1234});
    const b = await chatText('Let there be', {...sample, seed: 1234});
    const c = await chatText('Let there be', {...sample, seed: 98765});
    assert.equal(a, b);
    assert.notEqual(a, c);
  });

  test('chat logprobs: the chosen token and its alternatives', async () => {
    const r = await client.chat.completions.create({
      model: 'x', messages: user('And Moses said'), max_tokens: 6, logprobs: true, top_logprobs: 3, ...greedy,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 6);
    assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
    for (const t of content) {
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.logprob <= 0);
      // Greedy: the chosen token is the most likely one.
      assert.equal(t.top_logprobs[0].token, t.token);
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
      assert.ok(t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob);
      assert.ok(t.top_logprobs.reduce((s, a) => s + Math.exp(a.logprob), 0) <= 1 + 1e-5);
      assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
    }
    // The logprobs path (host sampling) and the GPU's greedy path choose the same tokens.
    const plain = await client.chat.completions.create({model: 'x', messages: user('And Moses said'), max_tokens: 6, ...greedy});
    assert.equal(plain.choices[0].message.content, r.choices[0].message.content);
  });

  test('completions logprobs', async () => {
    const r = await client.completions.create({model: 'x', prompt: 'Thou shalt', max_tokens: 4, logprobs: 2, ...greedy});
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    assert.deepEqual(lp.text_offset[0], 0);
    for (const top of lp.top_logprobs) assert.equal(Object.keys(top).length, 2);
  });

  test('a repeated prompt reuses the cached prefix pages (usage.prompt_tokens_details.cached_tokens)', async () => {
    const messages = user('Honour thy father and thy mother');
    const first = await client.chat.completions.create({model: 'x', messages, max_tokens: 2, ...greedy});
    await client.completions.create({model: 'x', prompt: 'Something else entirely', max_tokens: 2, ...greedy});
    const other = await client.chat.completions.create({model: 'x', messages, max_tokens: 2, ...greedy});
    const again = await client.chat.completions.create({model: 'x', messages, max_tokens: 2, ...greedy});
    assert.ok(again.usage.prompt_tokens > PAGE);
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, Math.floor((again.usage.prompt_tokens - 1) / PAGE) * PAGE);
    assert.ok(other.usage.prompt_tokens_details.cached_tokens < other.usage.prompt_tokens - 1);
    assert.equal(again.choices[0].message.content, first.choices[0].message.content);
  });

  test('a prompt and completion longer than the context: 400 context_length_exceeded', async () => {
    const ctx = await contextSize();
    await assert.rejects(
      client.chat.completions.create({model: 'x', messages: user('Amen'), max_tokens: ctx}),
      (e) => e.status === 400 && e.code === 'context_length_exceeded');
    const long = 'and '.repeat(ctx * 2);
    await assert.rejects(client.completions.create({model: 'x', prompt: long, max_tokens: 1}),
                         (e) => e.status === 400 && e.code === 'context_length_exceeded');
  });
});

describe('bad requests get OpenAI error objects and the server keeps serving', () => {
  test('malformed JSON, missing and wrong-typed fields, n != 1', async () => {
    let r = await post('/v1/chat/completions', '{"messages": [');
    assert.equal(r.status, 400);
    assertErrorObject(r.body);
    r = await post('/v1/chat/completions', '[1, 2]');
    assert.equal(r.status, 400);
    r = await post('/v1/chat/completions', JSON.stringify({model: 'x'}));
    assert.equal(r.status, 400);
    assertErrorObject(r.body, 400, 'messages');
    r = await post('/v1/chat/completions', JSON.stringify({messages: user('hi'), temperature: 'hot'}));
    assert.equal(r.status, 400);
    assertErrorObject(r.body, 400, 'temperature');
    r = await post('/v1/chat/completions', JSON.stringify({messages: [{role: 'wizard', content: 'x'}]}));
    assert.equal(r.status, 400);
    r = await post('/v1/completions', JSON.stringify({prompt: [1, -5]}));
    assert.equal(r.status, 400);
    assertErrorObject(r.body, 400, 'prompt');
    r = await post('/v1/chat/completions', JSON.stringify({messages: user('hi'), n: 2}));
    assert.equal(r.status, 400);
    assertErrorObject(r.body, 400, 'n');
    await assert.rejects(client.chat.completions.create({model: 'x', messages: user('hi'), max_tokens: 0}), (e) => e.status === 400);
  });

  test('unknown route: 404; body over the limit: 413; wrong or missing key: 401', async () => {
    let r = await post('/v1/engines', '{}');
    assert.equal(r.status, 404);
    assertErrorObject(r.body);
    r = await post('/v1/completions', JSON.stringify({prompt: 'x'.repeat(70000)}));
    assert.equal(r.status, 413);
    assertErrorObject(r.body);
    r = await post('/v1/completions', JSON.stringify({prompt: 'x'}), {Authorization: 'Bearer wrong'});
    assert.equal(r.status, 401);
    assert.equal(r.body.error.code, 'invalid_api_key');
    const bad = new OpenAI({baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0});
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    // Health and metrics need no key (probes and scrapers).
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    assert.equal((await fetch(`${server.url}/metrics`)).status, 200);
    assert.ok((await chatText('Still serving')).length > 0);
  });
});

describe('SSE framing (curl)', () => {
  test('events are "data: " lines separated by blank lines, ending with data: [DONE]', async () => {
    const {stdout} = await promisify(execFile)('curl', [
      '-sN', '-i', '--max-time', '120', `${server.url}/v1/chat/completions`, '-H', 'Content-Type: application/json',
      '-H', `Authorization: Bearer ${KEY}`,
      '-d', JSON.stringify({messages: user('Hear, O Israel'), max_tokens: 5, stream: true, temperature: 0,
                            stream_options: {include_usage: true}}),
    ]);
    const [head, body] = stdout.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /content-type: text\/event-stream/i);
    assert.ok(body.endsWith('data: [DONE]\n\n'), JSON.stringify(body.slice(-40)));
    const events = body.split('\n\n').filter((e) => e.length);
    const data = events.filter((e) => !e.startsWith(':'));
    for (const e of data) assert.match(e, /^data: [^\n]+$/);
    const json = data.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
    assert.equal(json.filter((j) => j.choices.length && j.choices[0].finish_reason === 'length').length, 1);
    assert.equal(json[json.length - 1].usage.completion_tokens, 5);
  });
});

describe('many clients', () => {
  const prompts = Array.from({length: 16}, (_, i) => `Chapter ${i + 1}: And it came to pass`);

  test('16 concurrent streaming clients each get exactly their text alone (greedy), and the metrics count them', async () => {
    const stream = async (p) => {
      const s = await client.completions.create({model: 'x', prompt: p, max_tokens: 8, ...greedy, stream: true});
      let t = '';
      for await (const c of s) t += c.choices[0].text;
      return t;
    };
    const alone = [];
    for (const p of prompts) alone.push(await stream(p));
    const before = await waitIdle(server.url);
    const together = await Promise.all(prompts.map(stream));
    assert.deepEqual(together, alone);
    const m = await waitIdle(server.url);
    const finished = (x) => (x['doppler_requests_finished_total{finish_reason="length"}'] || 0);
    assert.equal(finished(m) - finished(before), 16);
    assert.equal(m.doppler_generation_tokens_total - before.doppler_generation_tokens_total, 16 * 8);
    assert.equal(m.doppler_time_to_first_token_seconds_count - before.doppler_time_to_first_token_seconds_count, 16);
    assert.equal(m.doppler_kv_cache_usage_ratio, 0);
  });

  test('clients that disconnect mid-stream cancel their sequences; the server returns to idle', async () => {
    const before = await waitIdle(server.url);
    const leave = async (p) => {
      const controller = new AbortController();
      const s = await client.completions.create({model: 'x', prompt: p, max_tokens: 200, temperature: 0, stream: true},
                                                {signal: controller.signal});
      let n = 0;
      for await (const c of s) {
        assert.equal(c.choices[0].finish_reason, null);
        if (++n === 3) {
          controller.abort();  // the connection closes mid-stream
          break;
        }
      }
      return n;
    };
    const counts = await Promise.all([leave('Genesis'), leave('Exodus'), leave('Leviticus')]);
    assert.deepEqual(counts, [3, 3, 3]);
    const m = await waitIdle(server.url);
    const cancelled = (x) => (x['doppler_requests_finished_total{finish_reason="cancelled"}'] || 0);
    assert.equal(cancelled(m) - cancelled(before), 3);
    // They stopped early: far fewer than 3 × 200 tokens were generated.
    assert.ok(m.doppler_generation_tokens_total - before.doppler_generation_tokens_total < 3 * 100);
    assert.ok((await chatText('After the storm')).length > 0);
  });

  test('a storm past the queue: the excess gets 429, the rest their text, then idle', async () => {
    const rss = () => Number(fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/)[1]);
    await waitIdle(server.url);
    const rssBefore = rss();
    const before = await metrics(server.url);
    // As many streamed requests as the server runs and queues, each far from its end (no early
    // stop) while the storm comes, however fast the machine: a stream's response headers mean the
    // server has taken it.
    const long = Math.min(400, (await contextSize()) - 32);
    const hold = async (i) => {
      const controller = new AbortController();
      const r = await send('/v1/completions',
        JSON.stringify({prompt: `Psalm ${i}`, max_tokens: long, temperature: 0, ignore_eos: true, stream: true}),
        {signal: controller.signal});
      return {status: r.status, controller};
    };
    const held = await Promise.all(Array.from({length: PARALLEL + QUEUE}, (_, i) => hold(i)));
    assert.deepEqual(held.map((h) => h.status), held.map(() => 200));
    // The storm: every request past them gets 429, as an error object.
    const storm = await Promise.all(Array.from({length: 8}, (_, i) =>
      post('/v1/completions', JSON.stringify({prompt: `Proverb ${i}`, max_tokens: 8, temperature: 0}))));
    assert.deepEqual(storm.map((r) => r.status), storm.map(() => 429));
    for (const r of storm) assertErrorObject(r.body);
    // The held clients leave; the server cancels them and serves the next ones their text.
    for (const h of held) h.controller.abort();
    let m = await waitIdle(server.url);
    assert.equal(m.doppler_kv_cache_usage_ratio, 0);
    const rejected = (x) => (x['doppler_requests_rejected_total{status="429"}'] || 0);
    assert.equal(rejected(m) - rejected(before), storm.length);
    const next = await Promise.all(Array.from({length: 4}, (_, i) =>
      post('/v1/completions', JSON.stringify({prompt: `Psalm ${i}`, max_tokens: 48, temperature: 0, ignore_eos: true}))));
    for (const r of next) {
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.usage.completion_tokens, 48);
    }
    m = await waitIdle(server.url);
    assert.equal(m.doppler_kv_cache_usage_ratio, 0);
    // Memory back to where it was, within what allocators keep (44 requests of a few tokens).
    assert.ok(rss() - rssBefore < 32 * 1024, `resident memory grew from ${rssBefore} kB to ${rss()} kB`);
    assert.ok((await chatText('After the storm')).length > 0);
  });
});

describe('bench/serve', () => {
  test('the load generator reports every request\'s tokens (ignore_eos) and its latencies', async () => {
    const bench = new URL('../../bench/serve/serve_bench.mjs', import.meta.url).pathname;
    const {stdout} = await promisify(execFile)('node', [
      bench, '--url', server.url, '--api-key', KEY, '--clients', '3', '--requests', '5', '--prompt-tokens', '9',
      '--max-tokens', '6', '--json']);
    const r = JSON.parse(stdout);
    assert.equal(r.requests, 5);
    assert.equal(r.output_tokens, 5 * 6);
    for (const k of ['ttft_p50_s', 'ttft_p99_s', 'itl_p50_s', 'itl_p99_s', 'requests_per_s', 'output_tokens_per_s']) {
      assert.ok(Number.isFinite(r[k]) && r[k] > 0, `${k} = ${r[k]}`);
    }
    assert.ok(r.ttft_p50_s <= r.ttft_p99_s && r.itl_p50_s <= r.itl_p99_s);
  });
});

describe('against PyTorch', () => {
  // default_model/reference.json: the greedy continuations PyTorch computed in float32 with the
  // F16 model's f16-rounded weights, which `--dtype f32` reproduces (tests/default_model_test.cc).
  const modelDir = new URL('../../default_model/', import.meta.url).pathname;
  const reference = JSON.parse(fs.readFileSync(`${modelDir}reference.json`, 'utf8'));

  test('greedy completions give PyTorch\'s tokens: text and id prompts, GPU and host choice, streamed or not', async () => {
    const own = await startServer(['--model', `${modelDir}default-f16.gguf`, '--dtype', 'f32', '--kv-page', '1']);
    try {
      const c = new OpenAI({baseURL: `${own.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000});
      for (const [i, g] of reference.greedy.entries()) {
        const common = {model: 'x', max_tokens: g.ids.length, temperature: 0, ignore_eos: true};
        const byText = await c.completions.create({...common, prompt: g.prompt});
        assert.equal(byText.usage.prompt_tokens, g.prompt_ids.length);
        assert.equal(byText.usage.completion_tokens, g.ids.length);
        assert.equal(byText.choices[0].text, g.text, g.prompt);
        if (i > 0) continue;  // the other paths once each: lavapipe runs this model slowly
        // The host's choice from the logits (the logprobs path), on a prompt the cache holds.
        const byIds = await c.completions.create({...common, prompt: g.prompt_ids, logprobs: 1});
        assert.equal(byIds.usage.prompt_tokens_details.cached_tokens, g.prompt_ids.length - 1);
        assert.equal(byIds.choices[0].text, g.text, g.prompt);
        const stream = await c.completions.create({...common, prompt: g.prompt_ids, stream: true});
        let streamed = '';
        for await (const chunk of stream) streamed += chunk.choices[0].text;
        assert.equal(streamed, g.text, g.prompt);
      }
    } finally {
      assert.equal((await own.stop()).code, 0);
    }
  });
});

describe('SIGTERM', () => {
  test('lets a running request finish, refuses new ones, exits 0', async () => {
    const own = await startServer([]);
    const c = new OpenAI({baseURL: `${own.url}/v1`, apiKey: 'none', maxRetries: 0});
    const s = await c.completions.create({model: 'x', prompt: 'And the LORD', max_tokens: 40, temperature: 0, stream: true});
    const it = s[Symbol.asyncIterator]();
    let text = (await it.next()).value.choices[0].text;
    own.proc.kill('SIGTERM');
    await new Promise((res) => setTimeout(res, 300));
    const health = await fetch(`${own.url}/health`).catch(() => null);
    assert.ok(!health || health.status === 503);
    let finish = null;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      text += r.value.choices[0].text;
      finish = r.value.choices[0].finish_reason || finish;
    }
    assert.equal(finish, 'length');
    const {code} = await own.exited;
    assert.equal(code, 0);
  });
});
