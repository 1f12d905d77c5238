// The official OpenAI Node SDK's Responses API against a reclaim server:
// a response created, the same streamed, an agent's turn after a function
// call, and a previous_response_id refused. Prints one JSON line.
//   node openai_sdk_responses.cjs SDK_DIR BASE_URL MODEL
const { OpenAI } = require(process.argv[2]);

async function main() {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
  const model = process.argv[4];
  const out = {};
  const ask = { model, input: "Hello there", instructions: "Be brief.", max_output_tokens: 6, temperature: 0 };

  const created = await client.responses.create(ask);
  out.create = { object: created.object, status: created.status, text: created.output_text,
    items: created.output.map((o) => o.type), usage: created.usage };

  const stream = client.responses.stream(ask);
  const types = [];
  let deltas = "";
  let status = "";
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") status = ev.response.status;
  }
  // The SDK's snapshot of the stream, built from its events (it takes the
  // terminal response only from response.completed).
  const final = await stream.finalResponse();
  const text = final.output.filter((o) => o.type === "message")
    .flatMap((o) => o.content).filter((c) => c.type === "output_text").map((c) => c.text).join("");
  out.stream = { first: types[0], last: types[types.length - 1], deltas, text, status, sequence: types.length };

  const tools = [{ type: "function", name: "get_weather", parameters: {
    type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const turn = await client.responses.create({
    model, temperature: 0, max_output_tokens: 4, tools, tool_choice: "auto", store: false,
    input: [
      { role: "user", content: "Weather in Paris?" },
      { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
      { type: "function_call_output", call_id: "call_1", output: "18 degrees" },
    ],
  });
  out.turn = { status: turn.status, input_tokens: turn.usage.input_tokens, items: turn.output.map((o) => o.type) };

  try {
    await client.responses.create({ model, input: "Hi", previous_response_id: "resp_1" });
    out.previous = "accepted";
  } catch (e) {
    out.previous = { status: e.status, param: e.param };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
