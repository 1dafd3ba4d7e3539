// The web chat page at / in a real browser (Debian's chromium, headless, driven by puppeteer-core):
// load it, send a message, watch the reply stream in, stop one mid-way. Saves a screenshot
// (serve_web_page.png in DOPPLER_SCREENSHOT_DIR, the build folder under ctest).
import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import {metrics, startServer, waitIdle} from './server.mjs';

let server;
let browser;
let page;
let profile;

before(async () => {
  server = await startServer([]);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'doppler-chromium-'));
  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', `--user-data-dir=${profile}`],
  });
  page = await browser.newPage();
  await page.setViewport({width: 1100, height: 700});
  page.setDefaultTimeout(120_000);
});

after(async () => {
  if (browser) await browser.close();
  if (profile) fs.rmSync(profile, {recursive: true, force: true});
  if (server) assert.equal((await server.stop()).code, 0);
});

// The text of the last assistant message without its note, and whether it is still streaming.
const lastReply = () => page.evaluate(() => {
  const all = document.querySelectorAll('.msg.assistant');
  const m = all[all.length - 1];
  return m ? {text: m.firstChild ? m.firstChild.textContent : '', streaming: m.classList.contains('streaming'),
              note: m.querySelector('.note') ? m.querySelector('.note').textContent : ''} : null;
});

async function setField(id, value) {
  await page.$eval(`#${id}`, (el, v) => { el.value = v; }, String(value));
}

test('the page loads, sends a message and streams the reply', async () => {
  await page.goto(server.url, {waitUntil: 'networkidle0'});
  assert.equal(await page.title(), 'doppler');
  await page.waitForFunction(() => document.querySelector('#model').textContent.includes('default-q8_0.gguf'));
  await setField('temperature', 0);
  await setField('max_tokens', 24);
  // Count the reply's changes while it streams.
  await page.evaluate(() => {
    window.replyUpdates = 0;
    new MutationObserver(() => { window.replyUpdates += 1; })
        .observe(document.querySelector('#conversation'), {subtree: true, childList: true, characterData: true});
  });
  await page.type('#message', 'Who made the heaven and the earth?');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 1 &&
                                   !document.querySelector('.msg.assistant').classList.contains('streaming'));
  const reply = await lastReply();
  assert.ok(reply.text.length > 0);
  assert.ok(await page.evaluate(() => window.replyUpdates) > 5, 'the reply did not arrive in pieces');
  assert.match(await page.$eval('#rate', (e) => e.textContent), /^\d+(\.\d)? tok\/s$/);
  // The page shows what the API gives for the same conversation (greedy).
  const api = await (await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({messages: [{role: 'user', content: 'Who made the heaven and the earth?'}], max_tokens: 24,
                          temperature: 0}),
  })).json();
  assert.equal(reply.text, api.choices[0].message.content);
});

test('the stop button ends a reply mid-way and the server cancels it', async () => {
  const before = await waitIdle(server.url);
  await page.click('#clear');  // a new conversation: the default model's context is short
  await setField('max_tokens', 150);
  await page.type('#message', 'Tell me of the flood.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('.msg.assistant');
    return all.length === 1 && all[0].textContent.length > 12;
  });
  await page.click('#stop');
  await page.waitForFunction(() => !document.querySelector('#send').disabled);
  const reply = await lastReply();
  assert.equal(reply.note, 'stopped');
  assert.equal(reply.streaming, false);
  const m = await waitIdle(server.url);
  const cancelled = (x) => x['doppler_requests_finished_total{finish_reason="cancelled"}'] || 0;
  assert.equal(cancelled(m) - cancelled(before), 1);
  assert.ok(m.doppler_generation_tokens_total - before.doppler_generation_tokens_total < 150);
  const dir = process.env.DOPPLER_SCREENSHOT_DIR || os.tmpdir();
  await page.screenshot({path: path.join(dir, 'serve_web_page.png')});
});
