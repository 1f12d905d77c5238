// The official OpenAI Node SDK against a reclaim server: embeddings (which
// the SDK asks for as base64 and decodes itself), a JSON schema reply,
// logprobs, and an agent's transcript with a tool call. Prints one JSON line.
//   node openai_sdk_api.cjs SDK_DIR BASE_URL MODEL
const { OpenAI } = require(process.argv[2]);

async function main() {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
  const model = process.argv[4];
  const out = {};

  const emb = await client.embeddings.create({ model, input: ["the river runs", "a cat"] });
  out.embeddings = emb.data.map((d) => ({ index: d.index, length: d.embedding.length,
    norm: Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0)) }));

  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"], additionalProperties: false };
  const structured = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 900,
    messages: [{ role: "user", content: "A number as JSON." }],
    response_format: { type: "json_schema", json_schema: { name: "n", strict: true, schema } },
  });
  out.structured = { finish: structured.choices[0].finish_reason, content: structured.choices[0].message.content };

  const lp = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 6, logprobs: true, top_logprobs: 2,
    messages: [{ role: "user", content: "hello" }],
  });
  out.logprobs = { tokens: lp.usage.completion_tokens, entries: lp.choices[0].logprobs.content.length,
    top: lp.choices[0].logprobs.content.every((e) => e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token) };

  const tools = [{ type: "function", function: { name: "get_weather", parameters: {
    type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const replay = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 4, tools, tool_choice: "none",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "18 degrees" },
    ],
  });
  out.replay = { finish: replay.choices[0].finish_reason, content: typeof replay.choices[0].message.content };

  try {
    await client.chat.completions.create({ model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] });
    out.image = "accepted";
  } catch (e) {
    out.image = { status: e.status, param: e.param };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
