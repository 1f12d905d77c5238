// The official OpenAI and ollama-js clients sending images to a reclaim
// server: a chat with an image_url part (whole and streamed), a web address
// refused, Ollama's chat and generate with images, and /api/show's
// capabilities. Prints one JSON line.
//   node vision_clients.cjs OPENAI_SDK OLLAMA_CLIENT BASE_URL MODEL IMAGE.png OTHER.png
const fs = require("fs");
const OpenAI = require(process.argv[2]);
const { Ollama } = require(process.argv[3]);

async function main() {
  const base = process.argv[4], model = process.argv[5];
  const image = fs.readFileSync(process.argv[6]), other = fs.readFileSync(process.argv[7]);
  const url = (b) => "data:image/png;base64," + b.toString("base64");
  const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "none" });
  const out = {};
  const ask = (b) => [{ role: "user", content: [{ type: "text", text: "What is in this picture?" },
                                                 { type: "image_url", image_url: { url: url(b) } }] }];
  const whole = await openai.chat.completions.create({ model, messages: ask(image), max_tokens: 8, temperature: 0 });
  out.openai = { content: whole.choices[0].message.content, prompt_tokens: whole.usage.prompt_tokens };
  let text = "";
  const stream = await openai.chat.completions.create({ model, messages: ask(image), max_tokens: 8, temperature: 0, stream: true });
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  out.openai_stream = text;
  const second = await openai.chat.completions.create({ model, messages: ask(other), max_tokens: 8, temperature: 0 });
  out.openai_other = second.choices[0].message.content;
  try {
    await openai.chat.completions.create({ model, max_tokens: 4, messages: [{ role: "user", content: [
      { type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }] });
    out.web = "accepted";
  } catch (e) {
    out.web = { status: e.status, message: e.message };
  }

  const ollama = new Ollama({ host: base });
  const options = { temperature: 0, num_predict: 8 };
  const chat = await ollama.chat({ model, options, messages: [{ role: "user", content: "What is in this picture?", images: [new Uint8Array(image)] }] });
  out.ollama_chat = { content: chat.message.content, prompt_eval_count: chat.prompt_eval_count };
  const gen = await ollama.generate({ model, options, prompt: "What is in this picture?", images: [process.argv[6]] });
  out.ollama_generate = gen.response;
  out.capabilities = (await ollama.show({ model })).capabilities;
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.log(JSON.stringify({ failed: String(e && e.stack || e) }));
  process.exit(1);
});
