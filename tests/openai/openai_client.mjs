// The npm `openai` client (6.x), as users call it, against a running Cascade:
//   node openai_client.mjs BASE_URL API_KEY
// BASE_URL is the HTTP API's /v1 (e.g. http://127.0.0.1:8080/v1); the server serves a
// model with a chat template and needs API_KEY. Every check throws on failure; the exit
// code says whether all passed.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
let checks = 0;
const ok = (what) => {
  checks++;
  console.log(`ok   ${what}`);
};

async function expectError(promise, Kind, status, param, what) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof Kind, `${what}: ${e.constructor.name} (${e.message})`);
    assert.equal(e.status, status, what);
    if (param !== undefined) assert.equal(e.param, param, `${what}: param`);
    ok(`${what} -> ${status}${param ? ` (param ${param})` : ""}`);
    return e;
  }
  assert.fail(`${what} was accepted`);
}

async function collect(stream, chat) {
  let text = "";
  let usage = null;
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += chat ? (c.delta?.content ?? "") : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, usage, finish, chunks };
}

// Models: list and retrieve.
const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;
assert.equal((await client.models.retrieve(model)).id, model);
ok(`models.list and retrieve (${model})`);
await expectError(client.models.retrieve("no-such-model"), OpenAI.NotFoundError, 404, undefined,
  "models.retrieve of an unknown id");

// Completions: plain, streamed, seeded n=2, stop, logprobs, echo, a list of prompts.
const prompt = "Once upon a time";
const greedy = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
assert.equal(greedy.object, "text_completion");
assert.equal(greedy.choices.length, 1);
assert.ok(greedy.choices[0].text.length > 0);
assert.equal(greedy.choices[0].finish_reason, "length");
assert.equal(greedy.usage.completion_tokens, 24);
ok("completions.create, greedy");

const streamed = await collect(await client.completions.create({
  model, prompt, max_tokens: 24, temperature: 0, stream: true,
  stream_options: { include_usage: true } }), false);
assert.equal(streamed.text, greedy.choices[0].text);
assert.equal(streamed.finish, "length");
assert.deepEqual(streamed.usage, greedy.usage);
ok(`completions streamed (${streamed.chunks} chunks): the same text, usage at the end`);
const noUsage = await collect(await client.completions.create({
  model, prompt, max_tokens: 4, temperature: 0, stream: true }), false);
assert.equal(noUsage.usage, null);
ok("no usage in a stream without stream_options.include_usage");

const seeded = { model, prompt, max_tokens: 16, temperature: 1, seed: 1234, n: 2 };
const a = await client.completions.create(seeded);
const b = await client.completions.create(seeded);
assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
assert.notEqual(a.choices[0].text, a.choices[1].text);
const single = await client.completions.create({ ...seeded, n: 1 });
assert.equal(single.choices[0].text, a.choices[0].text);
assert.equal(a.usage.completion_tokens, a.choices.length * 16);
ok("n=2 with a seed: two different choices, the same on every call, choice 0 = n=1's");

const words = greedy.choices[0].text.trim().split(/\s+/);
const stopWord = words[Math.min(2, words.length - 1)];
const stopped = await client.completions.create({
  model, prompt, max_tokens: 24, temperature: 0, stop: [stopWord] });
assert.equal(stopped.choices[0].finish_reason, "stop");
assert.equal(stopped.choices[0].text, greedy.choices[0].text.slice(0, greedy.choices[0].text.indexOf(stopWord)));
ok(`stop ${JSON.stringify(stopWord)}: the text ends before it`);

const withLogprobs = await client.completions.create({
  model, prompt, max_tokens: 8, temperature: 0, logprobs: 3 });
const lp = withLogprobs.choices[0].logprobs;
assert.equal(lp.tokens.length, 8);
assert.equal(lp.token_logprobs.length, 8);
assert.equal(lp.top_logprobs.length, 8);
for (let i = 0; i < 8; i++) {
  assert.ok(lp.token_logprobs[i] <= 0);
  const alts = Object.values(lp.top_logprobs[i]);
  assert.ok(alts.length >= 1 && alts.length <= 3);
  assert.ok(Math.abs(Math.max(...alts) - lp.token_logprobs[i]) < 1e-5, "greedy = likeliest");
}
assert.equal(lp.tokens.join(""), withLogprobs.choices[0].text);
ok("completions logprobs=3: a logprob and alternatives per token, the greedy token likeliest");

const echoed = await client.completions.create({
  model, prompt, max_tokens: 4, temperature: 0, echo: true });
assert.ok(echoed.choices[0].text.startsWith(prompt));
ok("echo puts the prompt in front");

const two = await client.completions.create({
  model, prompt: ["Once upon a time", "The little dog"], max_tokens: 6, temperature: 0 });
assert.equal(two.choices.length, 2);
assert.equal(two.choices[0].text, greedy.choices[0].text.slice(0, two.choices[0].text.length));
ok("a list of two prompts gives two choices");

// Chat: plain, n=2 seeded, logprobs with top_logprobs, streamed.
const messages = [
  { role: "system", content: "You tell short stories." },
  { role: "user", content: "Tell me about a cat." },
];
const chat = await client.chat.completions.create({
  model, messages, max_tokens: 20, temperature: 0, logprobs: true, top_logprobs: 2 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
const content = chat.choices[0].logprobs.content;
assert.equal(content.length, chat.usage.completion_tokens);
for (const t of content) {
  assert.equal(t.top_logprobs.length, 2);
  assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5);
  if (!t.token.includes("\uFFFD")) assert.deepEqual(t.bytes, [...Buffer.from(t.token, "utf8")]);
}
ok("chat.completions with logprobs and top_logprobs=2");

const chatStream = await collect(await client.chat.completions.create({
  model, messages, max_tokens: 20, temperature: 0, stream: true }), true);
assert.equal(chatStream.text, chat.choices[0].message.content);
ok(`chat streamed (${chatStream.chunks} chunks): the same text`);

const chatN = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 1, seed: 99, n: 2 });
const chatN2 = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 1, seed: 99, n: 2 });
assert.equal(chatN.choices.length, 2);
assert.deepEqual(chatN.choices.map((c) => c.message.content), chatN2.choices.map((c) => c.message.content));
ok("chat n=2 with a seed: reproducible choices");

// What Cascade cannot honour is refused, naming the parameter.
await expectError(client.chat.completions.create({
  model, messages, tools: [{ type: "function", function: { name: "f", parameters: {} } }] }),
  OpenAI.BadRequestError, 400, "tools", "chat with tools");
await expectError(client.chat.completions.create({
  model, messages, response_format: { type: "json_object" } }),
  OpenAI.BadRequestError, 400, "response_format", "chat with response_format json_object");
await expectError(client.completions.create({ model, prompt, max_tokens: 4, n: 99 }),
  OpenAI.BadRequestError, 400, "n", "n=99");
await expectError(client.completions.create({ model: "other", prompt }),
  OpenAI.NotFoundError, 404, "model", "an unknown model");

// A client with the wrong key is turned away.
const stranger = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
await expectError(stranger.models.list(), OpenAI.AuthenticationError, 401, undefined,
  "a wrong API key");

console.log(`openai client: ${checks} checks passed`);
