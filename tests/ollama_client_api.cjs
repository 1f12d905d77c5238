// The official ollama-js client against a reclaim server: version, list,
// chat whole and streamed, generate streamed, ps, embed, show, an unknown
// model's error, and keep_alive 0. Prints one JSON line.
//   node ollama_client_api.cjs CLIENT_DIR BASE_URL MODEL
const { Ollama } = require(process.argv[2]);

async function main() {
  const ollama = new Ollama({ host: process.argv[3].replace(/\/v1$/, "") });
  const model = process.argv[4];
  const out = {};
  out.version = typeof (await ollama.version()).version === "string";
  out.list = (await ollama.list()).models.map((m) => m.name).sort();

  const messages = [{ role: "user", content: "hello" }];
  const options = { temperature: 0, num_predict: 5 };
  const chat = await ollama.chat({ model, messages, options });
  out.chat = { done: chat.done, eval_count: chat.eval_count, content: chat.message.content };

  let text = "", parts = 0;
  for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
    text += part.message.content;
    if (!part.done) parts++;
  }
  out.stream = { text, parts };

  let gen = "";
  for await (const part of await ollama.generate({ model, prompt: "hello", options, stream: true })) gen += part.response;
  out.generate = { text: gen };

  const ps = await ollama.ps();
  out.ps = { names: ps.models.map((m) => m.name), size: ps.models.length ? ps.models[0].size : 0 };

  const emb = await ollama.embed({ model, input: ["a cat", "the river runs"] });
  out.embed = { count: emb.embeddings.length, norm: Math.sqrt(emb.embeddings[0].reduce((s, x) => s + x * x, 0)) };

  out.show = { format: (await ollama.show({ model })).details.format };

  try {
    await ollama.chat({ model: "no-such-model", messages });
    out.error = "accepted";
  } catch (e) {
    out.error = { status: e.status_code, message: e.error };
  }

  await ollama.generate({ model, prompt: "", keep_alive: 0 });
  out.unloaded = (await ollama.ps()).models.length === 0;
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
