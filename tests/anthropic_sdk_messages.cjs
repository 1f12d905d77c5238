// The official Anthropic TypeScript SDK against a reclaim server: a message
// created, the same streamed (the SDK's own accumulation of the events),
// its tokens counted, and an agent's turn after a tool ran (tool_use and
// tool_result blocks).
// Prints one JSON line.
//   node anthropic_sdk_messages.cjs SDK_DIR BASE_URL CHAT_MODEL TOOL_MODEL
const Anthropic = require(process.argv[2]).default;

async function main() {
  // The key goes as X-Api-Key, the SDK's way.
  const client = new Anthropic({ baseURL: process.argv[3], apiKey: "sk-ant-test", maxRetries: 0 });
  const [model, toolModel] = [process.argv[4], process.argv[5]];
  const out = {};
  const ask = { model, max_tokens: 6, temperature: 0, system: "Be brief.",
    messages: [{ role: "user", content: [{ type: "text", text: "Hello there" }] }] };

  const created = await client.messages.create(ask);
  out.create = { type: created.type, role: created.role, model: created.model, stop_reason: created.stop_reason,
    text: created.content.filter((b) => b.type === "text").map((b) => b.text).join(""), usage: created.usage };

  const stream = client.messages.stream(ask);
  const events = [];
  let deltas = "";
  stream.on("streamEvent", (ev) => {
    events.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") deltas += ev.delta.text;
  });
  const final = await stream.finalMessage();
  out.stream = { first: events[0], last: events[events.length - 1], deltas, stop_reason: final.stop_reason,
    text: final.content.filter((b) => b.type === "text").map((b) => b.text).join(""), usage: final.usage };

  const { max_tokens, ...counted } = ask;
  out.count = await client.messages.countTokens(counted);

  // An agent's next turn: the call it made and its result go back in the
  // SDK's blocks, with the tools it sends every time.
  const tools = [{ name: "get_weather", description: "Current weather of a city", input_schema: {
    type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const question = { role: "user", content: "Weather in Paris?" };
  const turn = { model: toolModel, max_tokens: 4, temperature: 0, tools, tool_choice: { type: "auto" }, messages: [
    question,
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "18 degrees and sunny" }] },
  ] };
  const answered = await client.messages.create(turn);
  const { max_tokens: _, ...turnCounted } = turn;
  out.tool = { type: answered.type, stop_reason: answered.stop_reason, blocks: answered.content.map((b) => b.type),
    input_tokens: answered.usage.input_tokens + answered.usage.cache_read_input_tokens,
    counted: (await client.messages.countTokens(turnCounted)).input_tokens,
    question_only: (await client.messages.countTokens({ ...turnCounted, messages: [question] })).input_tokens };

  try {
    await client.messages.create({ model, messages: [{ role: "user", content: "Hi" }] });
    out.refused = "accepted";
  } catch (e) {
    out.refused = { status: e.status, type: e.error && e.error.error && e.error.error.type };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
