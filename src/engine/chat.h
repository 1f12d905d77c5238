// Chat messages to a prompt through llama.cpp's chat templates
// (llama_chat_apply_template: the built-in templates it recognises, by name
// or by the model's own Jinja text).
#pragma once

#include <string>
#include <vector>

#include "engine/model.h"

namespace reclaim {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Formats `messages` with `tmpl` (a built-in name such as "chatml" or
// "llama3", or template text), or with the model's own template when `tmpl`
// is empty. Ends with the assistant's turn opened. Throws Error when there is
// no template or llama.cpp does not support it.
std::string apply_chat_template(const Model& model, const std::vector<ChatMessage>& messages,
                                const std::string& tmpl = "");

// The built-in template names, comma-separated, for error messages and help.
std::string builtin_chat_templates();

}  // namespace reclaim
