// ollama-js's pull, with its progress, against a reclaim server that pulls
// from a registry; then a chat with the model, and its delete. Prints one
// JSON line.
//   node ollama_client_pull.cjs CLIENT_DIR BASE_URL MODEL
const { Ollama } = require(process.argv[2]);

async function main() {
  const ollama = new Ollama({ host: process.argv[3] });
  const model = process.argv[4];
  const out = { statuses: [], layers: {} };
  for await (const part of await ollama.pull({ model, insecure: true, stream: true })) {
    if (out.statuses[out.statuses.length - 1] !== part.status) out.statuses.push(part.status);
    if (part.digest) out.layers[part.digest] = { total: part.total, completed: part.completed };
  }
  const chat = await ollama.chat({ model, messages: [{ role: "user", content: "hi" }], options: { num_predict: 2 } });
  out.chat = { done: chat.done };
  out.listed = (await ollama.list()).models.map((m) => m.name).includes(model);
  out.deleted = (await ollama.delete({ model })).status;
  try {
    await ollama.pull({ model: model.replace(/tiny/, "nope"), insecure: true, stream: false });
    out.missing = "pulled";
  } catch (e) {
    out.missing = { status: e.status_code, error: e.error };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
