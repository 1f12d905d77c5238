// Chat through llama.cpp's own common library (common/chat.h): the model's
// Jinja template (or a built-in one by name), the tool-call formats, the
// grammar that a JSON schema or a tool list becomes, and the parser that
// reads a reply back into content, reasoning and tool calls. This is the
// code llama-server runs; reclaim writes no template engine or parser of its
// own. The types here hide common's, so that only chat.cpp includes it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <llama.h>

#include "core/error.h"
#include "engine/generate.h"

namespace reclaim {

class Model;

// A chat the template cannot render: messages it refuses, tools with a
// template that cannot show them, a schema that makes no grammar. The
// client's mistake (a 400).
class ChatError : public Error {
 public:
  explicit ChatError(const std::string& what, std::string param = "messages") : Error(what), param_(std::move(param)) {}
  // The request's field at fault: "messages", "tools", "response_format".
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// What a chat template may spend on one request: the engine's own bounds
// (patches/llama.cpp/jinja-bounds.patch: nesting 256, execution depth 1,000,
// 20 million steps, 256 KiB of stack kept) at reclaim's sizes below, a time,
// and a way to stop it. docs/safety.md says how they were chosen.
struct TemplateBounds {
  static constexpr std::chrono::milliseconds kTime{5000};
  static constexpr uint64_t kBytes = uint64_t{64} << 20;  // and kBytesPerInput for each byte of the request's
  static constexpr uint64_t kBytesPerInput = 64;           // messages, tools and schema
  std::chrono::milliseconds time = kTime;
  uint64_t bytes = 0;  // 0: kBytes and kBytesPerInput a byte of the request
  // Asked while it renders: true stops it (the client left, the model unloads).
  std::function<bool()> stop;
};

// A chat template that went over a bound (TemplateBounds): the defect of
// the model file or setting that gave the template, a 422.
class TemplateOverBound : public Error {
 public:
  using Error::Error;
};

// A render that TemplateBounds::stop ended.
class TemplateStopped : public Error {
 public:
  using Error::Error;
};

struct ChatTool {
  std::string name;
  std::string description;
  std::string parameters;  // a JSON schema, as JSON text
};

enum class ToolChoice { automatic, none, required };

// What of a last assistant message the reply continues (llama-server's
// continue_final_message): nothing (a new turn), whatever it ends in, its
// reasoning, or its content.
enum class Continuation { none, automatic, reasoning, content };

struct ChatRequest {
  // OpenAI's messages array as JSON text: string content or an array of text
  // parts, content null with tool_calls, tool messages. Checked by the caller.
  std::string messages;
  std::vector<ChatTool> tools;
  ToolChoice tool_choice = ToolChoice::automatic;
  std::optional<bool> parallel_tool_calls;  // unset: as the template allows
  std::string json_schema;                  // response_format's, as JSON text; empty: none
  // Whether a reasoning model thinks before it answers (Ollama's `think`;
  // the template's enable_thinking); unset: as the template does.
  std::optional<bool> think;
  // The template's generation prompt after the messages (unset: added).
  // Where the last message is the assistant's, that message is continued
  // instead whatever this says (a prefill, as llama-server and Ollama read
  // it); continue_final says what of it.
  std::optional<bool> add_generation_prompt;
  Continuation continue_final = Continuation::none;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// A reply read by the template's format.
struct ChatReply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

// What a streamed reply adds: text to the content or the reasoning, or a
// piece of tool call `tool_index` (its id and name come with its first).
struct ChatDelta {
  std::string content;
  std::string reasoning;
  size_t tool_index = std::string::npos;
  ToolCall tool;
};

// Reads a reply as it grows, with the template's parser. What the parser
// cannot read (random weights write anything) is content, as the text came.
class ChatReader {
 public:
  ChatReader();
  ~ChatReader();
  ChatReader(ChatReader&&) noexcept;
  ChatReader& operator=(ChatReader&&) noexcept;

  // Adds generated text (valid UTF-8); returns what the reply gained.
  std::vector<ChatDelta> push(std::string_view text);
  // The whole reply once generation ended; the deltas still owed go to `rest`.
  ChatReply finish(std::vector<ChatDelta>* rest = nullptr);
  // Whether the reply is read by a format (tools or reasoning), not plain text.
  bool parses() const;

 private:
  friend class ChatTemplate;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A request rendered: the prompt, the constraints on generation, and the
// reader for its reply.
struct ChatRender {
  std::string prompt;
  GrammarSpec grammar;
  std::vector<std::string> stops;             // the format's own, besides the request's
  std::vector<llama_token> preserved_tokens;  // special tokens the reader must see as text
  ChatReader reader;
};

class ChatTemplate {
 public:
  // The model's own template, or `override`: Jinja text, or one of
  // llama.cpp's built-in names ("chatml", "llama2", ...), which render
  // without Jinja and cannot show tools. A model with neither gets chatml
  // (uses_fallback()). Throws ChatError when the template does not parse,
  // TemplateOverBound when reading it (llama.cpp renders it to learn what it
  // can do) goes over a bound. Both verdicts are kept for the template's
  // text: the next ChatTemplate of the same text throws at once.
  // `jinja` false: the template (the model's own, chatml, or `override`'s
  // text) rendered by the built-in engine it resembles, as a built-in name
  // is; a ChatError where it resembles none.
  ChatTemplate(const Model& model, const std::string& override, const TemplateBounds& bounds = {}, bool jinja = true);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Throws ChatError for what it cannot render, TemplateOverBound and
  // TemplateStopped as the bounds say.
  ChatRender render(const ChatRequest& request, const TemplateBounds& bounds = {}) const;

  bool uses_fallback() const { return fallback_; }
  bool builtin() const { return builtin_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const Model& model_;
  bool fallback_ = false;
  bool builtin_ = false;
};

// Plain messages to a prompt, the assistant's turn opened (reclaim run, the
// tests): the model's template or `tmpl`, as ChatTemplate takes it.
struct ChatMessage {
  std::string role;
  std::string content;
};
std::string apply_chat_template(const Model& model, const std::vector<ChatMessage>& messages,
                                const std::string& tmpl = "");

// A JSON schema (JSON text) as a GBNF grammar; throws ChatError naming what
// is wrong with it.
std::string json_schema_grammar(const std::string& schema);

// What a Jinja template offers, read without a model (Ollama's /api/show
// capabilities): tool calls, and thinking that can be turned off and on.
// A template that does not parse offers neither.
struct ChatTemplateCaps {
  bool tools = false;
  bool thinking = false;
};
ChatTemplateCaps chat_template_caps(const std::string& jinja);

// The built-in template names, comma-separated, for error messages and help.
std::string builtin_chat_templates();

// Turns llama.cpp's common library's logging off, so that it starts no
// thread of its own; once, before any chat.
void quiet_common_log();

}  // namespace reclaim
