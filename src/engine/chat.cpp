#include "engine/chat.h"

#include <llama.h>

#include "core/error.h"

namespace reclaim {

std::string builtin_chat_templates() {
  const int32_t n = llama_chat_builtin_templates(nullptr, 0);
  std::vector<const char*> names(static_cast<size_t>(std::max(n, 0)));
  llama_chat_builtin_templates(names.data(), names.size());
  std::string out;
  for (const char* name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::string apply_chat_template(const Model& model, const std::vector<ChatMessage>& messages, const std::string& tmpl) {
  if (messages.empty()) throw Error("chat: no messages");
  const std::string& own = model.info().chat_template;
  const std::string& use = tmpl.empty() ? own : tmpl;
  if (use.empty()) {
    throw Error("model '" + model.info().path + "' has no chat template and none was given (built-in ones: " +
                builtin_chat_templates() + ")");
  }
  std::vector<llama_chat_message> chat;
  chat.reserve(messages.size());
  size_t chars = 0;
  for (const ChatMessage& m : messages) {
    chat.push_back({m.role.c_str(), m.content.c_str()});
    chars += m.role.size() + m.content.size();
  }
  std::string out(2 * chars + 256, '\0');
  int32_t n = llama_chat_apply_template(use.c_str(), chat.data(), chat.size(), true, out.data(),
                                        static_cast<int32_t>(out.size()));
  if (n > static_cast<int32_t>(out.size())) {
    out.resize(static_cast<size_t>(n));
    n = llama_chat_apply_template(use.c_str(), chat.data(), chat.size(), true, out.data(), n);
  }
  if (n < 0) {
    const std::string which = tmpl.empty() ? "the chat template of '" + model.info().path + "'" : "chat template '" + tmpl.substr(0, 40) + "'";
    throw Error(which + " is not one llama.cpp supports (built-in ones: " + builtin_chat_templates() + ")");
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace reclaim
