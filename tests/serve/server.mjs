// Starts `doppler serve` on a free port of 127.0.0.1 (the shipped default model unless told
// otherwise), waits until /health says ready, and stops it with SIGTERM.
import {spawn} from 'node:child_process';
import assert from 'node:assert/strict';

export const binary = process.env.DOPPLER_BINARY;

export async function startServer(args = []) {
  assert.ok(binary, 'DOPPLER_BINARY must name the doppler executable (ctest sets it)');
  const proc = spawn(binary, ['serve', '--port', '0', ...args], {stdio: ['ignore', 'ignore', 'pipe']});
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({code, signal})));
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    exited.then(({code}) => reject(new Error(`doppler serve exited (${code}) before listening:\n${log}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    const r = await fetch(`${url}/health`).catch(() => null);
    if (r && r.status === 200) break;
    assert.ok(!r || r.status === 503, `/health answered ${r && r.status} while loading`);
    assert.ok(Date.now() < deadline, `the server was not ready within 120 s:\n${log}`);
    await new Promise((res) => setTimeout(res, 200));
  }
  return {
    url, proc, exited,
    log: () => log,
    // SIGTERM; resolves with the exit status. Under DOPPLER_VALIDATION=1 (ctest), any message of
    // the Vulkan validation layer fails the test.
    stop: async () => {
      proc.kill('SIGTERM');
      const status = await exited;
      assert.doesNotMatch(log, /\[vulkan /, 'the validation layer reported messages');
      return status;
    },
  };
}

// The metrics as {name or name{labels}: value}.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// Polls until the server runs and queues nothing.
export async function waitIdle(url, ms = 60_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = await metrics(url);
    if (m.doppler_requests_running === 0 && m.doppler_requests_waiting === 0) return m;
    assert.ok(Date.now() < deadline, `not idle after ${ms} ms: ${JSON.stringify(m)}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}
