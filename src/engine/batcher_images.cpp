// The images of a batch's prompts: each encoded by the model's projector and
// decoded into its request's cells alone, before the shared batch reaches
// the text after it.
#include <mtmd-helper.h>
#include <mtmd.h>

#include "core/defer.h"
#include "engine/batcher.h"
#include "engine/batcher_job.h"
#include "engine/core_turns.h"
#include "engine/llama_runtime.h"
#include "engine/model.h"
#include "engine/projector.h"

namespace reclaim {

void Batcher::check_whole_images(const ImagePrompt& prompt) const {
  // A projector whose image attends to all of itself (Gemma 3's) needs each
  // image in one decode: split, its first part would never see the rest.
  mtmd_context* mtmd = model_.projector()->get();
  for (size_t i = 0; i < prompt.images().size(); ++i) {
    const ImageSpan& s = prompt.images()[i];
    if (s.n_tokens > n_batch_ && mtmd_decode_use_non_causal(mtmd, s.chunk)) {
      throw BadImage("image " + std::to_string(i + 1) + " is " + std::to_string(s.n_tokens) +
                     " embeddings, which this model's projector decodes at once, and its batch takes " +
                     std::to_string(n_batch_) + " (raise --batch)");
    }
  }
}

bool Batcher::feed_images() {
  std::vector<Job*>& live = held_;  // reserved: no allocation here
  live.clear();
  {
    std::lock_guard lock(mu_);
    for (Job* j : slots_) {
      if (j && j->images && !j->generating() && j->next_image < j->images->size() &&
          (*j->images)[j->next_image].start == j->n_fed) {
        live.push_back(j);
      }
    }
  }
  for (Job* j : live) feed_image(*j);
  return !live.empty();
}

void Batcher::feed_image(Job& j) {
  const ImageSpan& image = (*j.images)[j.next_image];
  mtmd_context* mtmd = model_.projector()->get();
  // The image's decode stops, as a step does, when its request is stopped.
  in_batch_.push_back(&j);
  Defer out([this] { in_batch_.clear(); });
  try {
    const StepTurn turn(model_);
    // Its embeddings until they are in the cells: on the batch's scope,
    // which only this thread's end closes, not on the request's, whose
    // cleanups (newest first) could run while this thread still reads them.
    Scope::Slot slot = scope_.reserve(Kind::buffer, "image embeddings of " + base_name(j.scope->path()));
    mtmd_batch* encoded = mtmd_batch_init(mtmd);
    if (!encoded) throw std::bad_alloc();
    const uint64_t bytes = static_cast<uint64_t>(image.n_tokens) * static_cast<uint64_t>(llama_model_n_embd_inp(model_.get())) * sizeof(float);
    const CleanupId id = slot.arm(bytes, [encoded] { mtmd_batch_free(encoded); });
    Defer free_embeddings([&] { scope_.release(id); });
    // The projector computes on threads of its own: the model's, left
    // polling for their next graph, would take the cores from it (cycles of
    // the audit's serve-vision took 2-3x raw llama.cpp's with them spinning).
    // The next decode wakes them.
    if (ggml_threadpool* pool = model_.threadpool()) ggml_threadpool_pause(pool);
    // The encode stops too: on a CPU a large image's takes seconds, which a
    // client that left, or an unload, would otherwise wait for.
    mtmd_set_abort_callback(mtmd, abort_poll, this);
    Defer unhook([mtmd] { mtmd_set_abort_callback(mtmd, nullptr, nullptr); });
    take_llama_errors();
    float* embd = nullptr;
    if (mtmd_batch_add_chunk(encoded, image.chunk) == 0 && mtmd_batch_encode(encoded) == 0) {
      embd = mtmd_batch_get_output_embd(encoded, image.chunk);
    }
    if (!embd) {
      const std::string why = take_llama_errors();
      if (abort_poll(this)) {  // stopped: the next turn retires it
        encodes_stopped_.fetch_add(1);
        return;
      }
      throw Error("the projector could not encode image " + std::to_string(j.next_image + 1) +
                  (why.empty() ? "" : ": " + why));
    }
    llama_pos past = j.n_past;
    const int32_t rc = mtmd_helper_decode_image_chunk(mtmd, ctx_.get(), image.chunk, embd, j.n_past, j.seq, n_batch_,
                                                      &past, nullptr, nullptr);
    steps_.fetch_add(1);
    tokens_.fetch_add(static_cast<uint64_t>(image.n_tokens));
    busy_.fetch_add(1);
    if (rc == 2) return;  // aborted: the request is stopping; the next turn retires it
    if (rc != 0) {
      throw Error("llama_decode failed (code " + std::to_string(rc) + ") at image " + std::to_string(j.next_image + 1) +
                  " of " + std::to_string(image.n_tokens) + " embeddings");
    }
    j.n_past = past;
    j.n_fed += image.n_tokens;
    j.extra_cells += image.n_tokens - image.n_pos;
    ++j.next_image;
  } catch (...) {
    j.error = std::current_exception();
    std::move(out).invoke();
    retire(j, false);
    return;
  }
  report_progress(j, false);
}

}  // namespace reclaim
