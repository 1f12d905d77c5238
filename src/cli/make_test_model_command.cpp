#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/size.h"
#include "engine/test_model.h"
#include "engine/test_projector.h"

namespace reclaim::cli {

Command add_make_test_model(CLI::App& app) {
  auto* sub = app.add_subcommand("make-test-model", "write a deterministic random-weight llama GGUF for tests");
  struct Args {
    std::string out, vocab = "bpe", type = "f16", size, chat_template, mmproj;
    int64_t image_size = 64;
    int64_t embd = 0, layers = 0, ff = 0, zero_layers_from = -1;
    int split = 1;
    uint64_t seed = 1;
    bool fim = false, reranker = false;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--out,-o", a->out, "output file")->required();
  sub->add_option("--vocab", a->vocab, "spm, bpe (qwen2), another of llama.cpp's models/ggml-vocab-NAME.gguf by NAME (gpt-neox), a vocab GGUF file, or none (token ids only, 128 of them)")->capture_default_str();
  sub->add_option("--size", a->size, "target size, e.g. 300MiB (or give --embd and --layers)");
  sub->add_option("--embd", a->embd, "embedding width (multiple of 64)");
  sub->add_option("--layers", a->layers, "number of blocks");
  sub->add_option("--ff", a->ff, "feed-forward width (default 8/3 of --embd)");
  sub->add_option("--type", a->type, "f32, f16 or q8_0")->capture_default_str();
  sub->add_option("--seed", a->seed, "weights seed")->capture_default_str();
  sub->add_option("--chat-template", a->chat_template,
                  "Jinja chat template to write in: a file, or the name of one in llama.cpp's models/templates "
                  "(e.g. Qwen-Qwen2.5-7B-Instruct)");
  sub->add_flag("--fim", a->fim,
                "add Qwen2.5-Coder's fill-in-the-middle tokens to the vocabulary (a code model for /infill)");
  sub->add_flag("--reranker", a->reranker,
                "write a reranker (qwen3 with rank pooling and a yes/no classifier head, as Qwen3-Reranker "
                "converts) for /rerank");
  sub->add_option("--zero-layers-from", a->zero_layers_from,
                  "layers from N on add nothing (zero output projections): the model answers as the same --seed and "
                  "--embd with N layers does, a speculative decoding target whose draft is always right");
  sub->add_option("--mmproj", a->mmproj,
                  "also write an image projector for this model to this file (llava's mlp type, random weights, "
                  "loaded by llama.cpp's mtmd: the model's --mmproj)");
  sub->add_option("--image-size", a->image_size,
                  "the projector's image side in pixels (a multiple of 16; an image is (side/16)^2 embeddings)")
      ->capture_default_str();
  sub->add_option("--split", a->split, "write the model in this many parts, as llama.cpp's gguf-split does "
                                      "(OUT-00001-of-0000N.gguf, ...)")->capture_default_str();
  return [a] {
    if (!a->mmproj.empty() && (a->image_size < 16 || a->image_size % 16 != 0 || a->image_size > 8192)) {
      throw Error("--image-size must be a multiple of 16 from 16 to 8192, not " + std::to_string(a->image_size));
    }
    TestModelSpec spec;
    spec.split = a->split;
    spec.fim = a->fim;
    spec.reranker = a->reranker;
    spec.vocab = a->vocab;
    spec.type = a->type;
    spec.size = a->size.empty() ? 0 : parse_size(a->size);
    spec.n_embd = a->embd;
    spec.n_layer = a->layers;
    spec.n_ff = a->ff;
    spec.seed = a->seed;
    spec.zero_layers_from = a->zero_layers_from;
    if (!a->chat_template.empty()) {
      spec.chat_template = llama_template(a->chat_template);
      if (spec.chat_template.empty()) {
        std::ifstream f(a->chat_template, std::ios::binary);
        if (!f) throw Error("--chat-template: '" + a->chat_template + "' is neither a readable file nor a template in llama.cpp's models/templates");
        std::ostringstream text;
        text << f.rdbuf();
        spec.chat_template = text.str();
      }
    }
    TestModelShape s = make_test_model(spec, a->out);
    std::printf("%s: %s, vocab %lld, embd %lld, layers %lld, ff %lld, heads %lld/%lld kv, %s %s\n", a->out.c_str(),
                a->reranker ? "qwen3 reranker" : "llama", static_cast<long long>(s.n_vocab), static_cast<long long>(s.n_embd),
                static_cast<long long>(s.n_layer), static_cast<long long>(s.n_ff),
                static_cast<long long>(s.n_head), static_cast<long long>(s.n_head_kv), a->type.c_str(),
                format_bytes(s.bytes).c_str());
    if (!a->mmproj.empty()) {
      TestProjectorSpec ps;
      ps.n_embd_text = s.n_embd;
      ps.image_size = a->image_size;
      ps.seed = a->seed;
      make_test_projector(ps, a->mmproj);
      std::printf("%s: image projector (mlp), %lld pixels a side, %lld embeddings an image\n", a->mmproj.c_str(),
                  static_cast<long long>(ps.image_size), static_cast<long long>(test_projector_tokens(ps)));
    }
    return 0;
  };
}

}  // namespace reclaim::cli
