// The chat fields of an OpenAI request, checked the way OpenAI checks them
// (a wrong one is a 400 whose `param` names it): messages with string, null
// or text-part content and tool calls; tools and tool_choice; and the output
// format (response_format, and llama-server's json_schema and grammar).
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai.h"

namespace reclaim::server {

// messages, tools, tool_choice, parallel_tool_calls into r.chat_input.
void parse_chat_fields(const nlohmann::json& j, CompletionRequest& r);
// response_format, json_schema and grammar into r.json_schema / r.grammar;
// a schema is checked by making its grammar, which a completion (not a chat,
// whose template makes its own) takes as r.generate.grammar.
void parse_output_format(const nlohmann::json& j, CompletionRequest& r);
// A model's default system message (its settings' `system`, Ollama's
// SYSTEM) first in a chat that has no system or developer message.
void add_default_system(ChatRequest& chat, const std::string& system);

}  // namespace reclaim::server
