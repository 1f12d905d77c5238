// Streams a chat completion from a reclaim server with the official OpenAI
// Node SDK and prints what it got as one JSON line.
//   node openai_sdk_stream.cjs SDK_DIR BASE_URL MODEL
const { OpenAI } = require(process.argv[2]);

async function main() {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
  const stream = await client.chat.completions.create({
    model: process.argv[4],
    messages: [{ role: "user", content: "hello" }],
    max_tokens: 8,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", chunks = 0, usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      chunks++;
      if (choice.delta && choice.delta.content) text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  const models = await client.models.list();
  console.log(JSON.stringify({ text, chunks, usage, finish, models: models.data.map((m) => m.id) }));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
