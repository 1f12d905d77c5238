// Which llama.cpp reclaim runs, as llama-server names it ("b1-80fb11a": its
// common library's build number and commit), for the answers that carry it
// (OpenAI's system_fingerprint, /props's build_info).
#pragma once

#include <string>

namespace reclaim {

const std::string& llama_build();

}  // namespace reclaim
