// Drives a running kiln server with the official `openai` npm client: what a real
// OpenAI SDK user does must work against `kiln serve`.
//
// Environment: KILN_BASE_URL (e.g. http://127.0.0.1:8420/v1), KILN_MODEL_ID (the served id) and
// KILN_API_KEY (the server's key). run.sh starts a server on the tiny-chat model with that key
// and sets all three.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KILN_BASE_URL;
const model = process.env.KILN_MODEL_ID;
const apiKey = process.env.KILN_API_KEY;
if (!baseURL || !model || !apiKey) {
  throw new Error('set KILN_BASE_URL (…/v1), KILN_MODEL_ID and KILN_API_KEY; tests/server/openai_client/run.sh does');
}

// No retries: a 5xx or a dropped connection must show up as a failure, not be papered over.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

const PROMPT = [{ role: 'user', content: 'Tell me a short story about a kiln.' }];
const FINISH_NATURAL = ['stop', 'length'];

async function greedy(extra = {}) {
  return client.chat.completions.create({
    model,
    messages: PROMPT,
    max_tokens: 24,
    temperature: 0,
    ...extra,
  });
}

test('chat completion, non-streaming', async () => {
  const r = await greedy({ max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.match(r.id, /\S/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'non-empty content');
  assert.ok(FINISH_NATURAL.includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 12);
});

test('chat completion, streaming: deltas concatenate, last chunk carries finish_reason', async () => {
  const stream = await greedy({ stream: true, max_tokens: 16 });
  let text = '';
  let chunks = 0;
  let last = null;
  let id = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, model);
    if (id === null) id = chunk.id;
    assert.equal(chunk.id, id, 'every chunk has the same id');
    if (chunk.choices.length === 0) continue;
    assert.equal(chunk.choices.length, 1);
    assert.equal(chunk.choices[0].index, 0);
    text += chunk.choices[0].delta?.content ?? '';
    last = chunk;
    chunks++;
  }
  assert.ok(chunks >= 2, `got ${chunks} chunks`);
  assert.ok(text.length > 0, 'concatenated deltas are non-empty');
  assert.ok(FINISH_NATURAL.includes(last.choices[0].finish_reason),
            `last chunk finish_reason ${last.choices[0].finish_reason}`);

  // The stream and the non-streamed response are the same greedy generation.
  const whole = await greedy({ max_tokens: 16 });
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(last.choices[0].finish_reason, whole.choices[0].finish_reason);
});

test('n: 3 with a seed gives three choices indexed 0..2', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: PROMPT,
    max_tokens: 8,
    temperature: 0.9,
    seed: 1234,
    n: 3,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1, 2]);
  for (const c of r.choices) {
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(FINISH_NATURAL.includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  }
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 3 * 8);

  // The same seed gives the same three choices.
  const again = await client.chat.completions.create({
    model, messages: PROMPT, max_tokens: 8, temperature: 0.9, seed: 1234, n: 3,
  });
  const texts = (resp) =>
    [...resp.choices].sort((a, b) => a.index - b.index).map((c) => c.message.content);
  assert.deepEqual(texts(again), texts(r));
});

test('n: 2 streamed through the SDK stream helper: per-choice role, content and finish_reason', async () => {
  const params = {
    model, messages: PROMPT, max_tokens: 8, temperature: 0.9, seed: 77, n: 2,
  };
  const stream = client.chat.completions.stream(params);
  const deltas = ['', ''];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      assert.ok(c.index === 0 || c.index === 1, `choice index ${c.index}`);
      deltas[c.index] += c.delta?.content ?? '';
    }
  }
  // finalChatCompletion() throws when a choice lacks its role or finish_reason.
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices.length, 2);
  const byIndex = [...final.choices].sort((a, b) => a.index - b.index);
  assert.deepEqual(byIndex.map((c) => c.index), [0, 1]);
  for (const c of byIndex) {
    assert.equal(c.message.role, 'assistant');
    assert.equal(c.message.content, deltas[c.index]);
    assert.ok(FINISH_NATURAL.includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  }
  // Choice i samples with seed + i whether streamed or not.
  const whole = await client.chat.completions.create(params);
  const texts = [...whole.choices].sort((a, b) => a.index - b.index).map((c) => c.message.content);
  assert.deepEqual(texts, deltas);
});

test('temperature 0 twice gives identical text', async () => {
  const a = await greedy();
  const b = await greedy();
  assert.ok(a.choices[0].message.content.length > 0);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.completion_tokens, b.usage.completion_tokens);
});

// A substring of `text` near its middle that occurs in it exactly once and has no whitespace at
// its ends (so that it cannot depend on how whitespace is detokenised around it).
function uniqueMiddleSubstring(text) {
  const chars = Array.from(text); // code points: never split a surrogate pair
  const mid = Math.floor(chars.length / 2);
  for (const len of [4, 5, 6, 3, 8]) {
    for (let d = 0; d < chars.length; d++) {
      for (const start of [mid - d, mid + d]) {
        if (start < 1 || start + len > chars.length) continue;
        const s = chars.slice(start, start + len).join('');
        if (s.trim() !== s || s.includes('\uFFFD')) continue;
        const first = text.indexOf(s);
        if (first > 0 && text.indexOf(s, first + 1) === -1) return s;
      }
    }
  }
  return null;
}

test('a stop string ends the content just before it, with finish_reason stop', async () => {
  const full = await greedy({ max_tokens: 32 });
  const text = full.choices[0].message.content;
  assert.ok(Array.from(text).length >= 8, `greedy text too short to cut: ${JSON.stringify(text)}`);
  const stop = uniqueMiddleSubstring(text);
  assert.ok(stop, `no substring occurring once in ${JSON.stringify(text)}`);
  const cut = await greedy({ max_tokens: 32, stop: [stop] });
  assert.equal(cut.choices[0].message.content, text.slice(0, text.indexOf(stop)),
               `stop ${JSON.stringify(stop)} in ${JSON.stringify(text)}`);
  assert.equal(cut.choices[0].finish_reason, 'stop');

  // The same through the stream.
  const stream = await greedy({ max_tokens: 32, stop: stop, stream: true });
  let streamed = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      streamed += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(streamed, text.slice(0, text.indexOf(stop)));
  assert.equal(finish, 'stop');
});

test('tools: a get_weather function is accepted and the completion finishes cleanly', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city'],
      },
    },
  }];
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools,
    tool_choice: 'auto',
    max_tokens: 24,
    temperature: 0,
  });
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason),
            `finish_reason ${c.finish_reason}`);
  assert.equal(c.message.role, 'assistant');
  if (c.finish_reason === 'tool_calls') {
    assert.ok(c.message.tool_calls.length > 0);
    for (const call of c.message.tool_calls) {
      assert.equal(call.type, 'function');
      assert.equal(typeof call.function.name, 'string');
      assert.equal(typeof call.function.arguments, 'string');
    }
  } else {
    assert.equal(typeof c.message.content, 'string');
  }
});

test('stream_options.include_usage: a usage chunk, completion_tokens == max_tokens on length', async () => {
  const maxTokens = 10;
  const stream = await greedy({
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });
  let finish = null;
  let usage = null;
  let usageChunks = 0;
  let contentChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) {
      usage = chunk.usage;
      usageChunks++;
      assert.equal(chunk.choices.length, 0, 'the usage chunk has no choices');
      continue;
    }
    assert.ok(chunk.usage === null || chunk.usage === undefined,
              'only the usage chunk carries usage');
    assert.equal(usage, null, 'no chunk with choices after the usage chunk');
    for (const c of chunk.choices) {
      if (c.delta?.content) contentChunks++;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(usageChunks, 1);
  assert.ok(FINISH_NATURAL.includes(finish), `finish_reason ${finish}`);
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= maxTokens);
  assert.ok(contentChunks <= usage.completion_tokens);
  if (finish === 'length') assert.equal(usage.completion_tokens, maxTokens);
});

test('models.list returns the served id', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model), `served id ${model} in ${JSON.stringify(ids)}`);
});

test('an invalid request (temperature -1) throws APIError 400 naming temperature', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model,
      messages: PROMPT,
      max_tokens: 4,
      temperature: -1,
    }),
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `not an APIError: ${err}`);
      assert.ok(err instanceof OpenAI.BadRequestError, `not a BadRequestError: ${err}`);
      assert.equal(err.status, 400);
      assert.match(err.message, /temperature/);
      assert.equal(err.param, 'temperature');
      assert.equal(err.type, 'invalid_request_error');
      return true;
    },
  );
});

test('a client with a wrong key gets AuthenticationError 401 (invalid_api_key, WWW-Authenticate: Bearer)', async () => {
  const wrong = new OpenAI({ baseURL, apiKey: `${apiKey}-wrong`, maxRetries: 0, timeout: 30_000 });
  for (const call of [() => wrong.models.list(), () => wrong.chat.completions.create({ model, messages: PROMPT, max_tokens: 4 })]) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `not an AuthenticationError: ${err}`);
      assert.equal(err.status, 401);
      assert.equal(err.code, 'invalid_api_key');
      assert.match(err.message, /not this server's/);
      assert.match(err.headers.get('www-authenticate') ?? '', /^Bearer/);
      return true;
    });
  }
});
