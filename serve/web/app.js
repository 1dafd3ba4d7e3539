// The chat page: keeps the conversation, streams each reply from /v1/chat/completions (server-sent
// events), stops one on request, and shows the reply's tokens per second as it streams.
'use strict';

const $ = (id) => document.getElementById(id);
const conversation = [];  // {role, content}
let controller = null;    // the reply being streamed, to stop it

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  $('conversation').appendChild(div);
  div.scrollIntoView({block: 'end'});
  return div;
}

function headers() {
  const h = {'Content-Type': 'application/json'};
  const key = $('api_key').value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

function number(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function requestBody() {
  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({role: 'system', content: system});
  messages.push(...conversation);
  return {
    messages, stream: true, stream_options: {include_usage: true},
    temperature: number('temperature'), top_p: number('top_p'), top_k: number('top_k'),
    min_p: number('min_p'), max_tokens: number('max_tokens'), seed: number('seed'),
  };
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

// Reads server-sent events from a fetch response; calls onData with each event's data.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('data: ')) onData(line.slice(6));
      }
    }
  }
}

async function send(text) {
  conversation.push({role: 'user', content: text});
  addMessage('user', text);
  const reply = addMessage('assistant', '');
  reply.classList.add('streaming');
  controller = new AbortController();
  setBusy(true);
  let content = '';
  let tokens = 0;
  let first = 0;
  let note = '';
  try {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (!response.ok) {
      const err = await response.json().catch(() => ({}));
      throw new Error(err.error ? err.error.message : `HTTP ${response.status}`);
    }
    await readEvents(response, (data) => {
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) {
        note = `${chunk.usage.completion_tokens} tokens`;
        return;
      }
      const choice = chunk.choices[0];
      if (choice.delta && choice.delta.content) {
        content += choice.delta.content;
        reply.textContent = content;
        reply.scrollIntoView({block: 'end'});
      }
      if (!choice.finish_reason) {
        tokens += 1;
        const now = performance.now();
        if (!first) first = now;
        if (tokens > 1) $('rate').textContent = `${((tokens - 1) * 1000 / (now - first)).toFixed(1)} tok/s`;
      } else {
        note = choice.finish_reason === 'length' ? 'stopped at the token limit' : '';
      }
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      note = 'stopped';
    } else {
      reply.classList.add('error');
      note = e.message;
    }
  }
  reply.classList.remove('streaming');
  reply.textContent = content;
  if (note) {
    const span = document.createElement('span');
    span.className = 'note';
    span.textContent = note;
    reply.appendChild(span);
  }
  conversation.push({role: 'assistant', content});
  controller = null;
  setBusy(false);
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('message').value.trim();
  if (!text || controller) return;
  $('message').value = '';
  send(text);
});
$('message').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => { if (controller) controller.abort(); });
$('clear').addEventListener('click', () => {
  if (controller) controller.abort();
  conversation.length = 0;
  $('conversation').replaceChildren();
});

fetch('/v1/models', {headers: headers()}).then((r) => r.json()).then((m) => {
  if (m.data) $('model').textContent = `${m.data[0].id} · context ${m.data[0].max_model_len}`;
}).catch(() => {});
