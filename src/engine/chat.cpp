#include "engine/chat.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <mutex>
#include <unordered_map>

// llama.cpp's common library (its common/ folder on the include path).
#include <chat.h>
#include <common.h>
#include <jinja/limits.h>
#include <json-schema-to-grammar.h>
#include <json.h>
#include <log.h>

#include <nlohmann/json.hpp>

#include "engine/model.h"

namespace reclaim {

namespace {

std::vector<std::string> builtin_names() {
  const int32_t n = llama_chat_builtin_templates(nullptr, 0);
  std::vector<const char*> names(static_cast<size_t>(std::max(n, 0)));
  llama_chat_builtin_templates(names.data(), names.size());
  return {names.begin(), names.end()};
}

bool is_builtin_name(const std::string& s) {
  for (const std::string& name : builtin_names()) {
    if (s == name) return true;
  }
  return false;
}

bool looks_like_jinja(const std::string& s) {
  return s.find("{{") != std::string::npos || s.find("{%") != std::string::npos;
}

common_chat_tool_choice to_common(ToolChoice c) {
  switch (c) {
    case ToolChoice::none: return COMMON_CHAT_TOOL_CHOICE_NONE;
    case ToolChoice::required: return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
    case ToolChoice::automatic: break;
  }
  return COMMON_CHAT_TOOL_CHOICE_AUTO;
}

std::string special_piece(const llama_vocab* vocab, llama_token t) { return token_piece(vocab, t, true); }

// The tokens of the generation prompt (the reply's opening, which the
// template already wrote) that the grammar reads before the first sampled
// one. Taken from the end of the prompt's own tokens, as the model sees
// them: tokenized alone, a sentencepiece vocabulary puts a space before the
// first ("<|im_start|>" becomes "▁<", "|", ...), which no grammar expects.
// Failing that, common_sampler_init's way: tokenized alone, a first token
// that is only that space dropped.
std::vector<llama_token> prefill_tokens(const llama_vocab* vocab, const std::string& prompt,
                                        const std::string& generation_prompt) {
  const std::vector<llama_token> all = tokenize(vocab, prompt, false, true);
  std::string tail;
  size_t i = all.size();
  while (i > 0 && tail.size() < generation_prompt.size()) tail = special_piece(vocab, all[--i]) + tail;
  if (tail == generation_prompt) return {all.begin() + static_cast<std::ptrdiff_t>(i), all.end()};
  std::vector<llama_token> out = tokenize(vocab, generation_prompt, false, true);
  if (!out.empty()) {
    const std::string first = special_piece(vocab, out.front());
    const bool blank = !first.empty() && std::all_of(first.begin(), first.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    if (blank && !std::isspace(static_cast<unsigned char>(generation_prompt[0]))) out.erase(out.begin());
  }
  return out;
}

// Triggers as llama.cpp's lazy grammar sampler takes them (common_sampler_init,
// and llama-server's turning of one-token words into token triggers).
void add_triggers(const llama_vocab* vocab, const std::vector<common_grammar_trigger>& triggers,
                  const std::vector<llama_token>& preserved, GrammarSpec& g) {
  for (const common_grammar_trigger& t : triggers) {
    switch (t.type) {
      case COMMON_GRAMMAR_TRIGGER_TYPE_WORD: {
        const std::vector<llama_token> ids = tokenize(vocab, t.value, false, true);
        if (ids.size() == 1 && std::find(preserved.begin(), preserved.end(), ids[0]) != preserved.end()) {
          g.trigger_tokens.push_back(ids[0]);
        } else {
          g.trigger_patterns.push_back(regex_escape(t.value));
        }
        break;
      }
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:
        g.trigger_patterns.push_back(t.value);
        break;
      case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: {
        std::string anchored = "^$";
        if (!t.value.empty()) {
          anchored = (t.value.front() != '^' ? "^" : "") + t.value + (t.value.back() != '$' ? "$" : "");
        }
        g.trigger_patterns.push_back(anchored);
        break;
      }
      case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:
        g.trigger_tokens.push_back(t.token);
        break;
    }
  }
}

std::string random_call_id() {
  static std::atomic<uint64_t> next{1};
  static const uint64_t salt = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  uint64_t x = (next.fetch_add(1) + salt) * 0x9E3779B97F4A7C15ull;
  static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 16; ++i) {
    id += digits[x % 62];
    x = x / 62 + (x << 7) * 0x2545F4914F6CDD1Dull;
  }
  return id;
}

ChatDelta to_delta(const common_chat_msg_diff& d) {
  ChatDelta out;
  out.content = d.content_delta;
  out.reasoning = d.reasoning_content_delta;
  out.tool_index = d.tool_call_index;
  out.tool = {d.tool_call_delta.id, d.tool_call_delta.name, d.tool_call_delta.arguments};
  return out;
}

}  // namespace

std::string builtin_chat_templates() {
  std::string out;
  for (const std::string& name : builtin_names()) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

void quiet_common_log() {
  // The library logs through a worker thread that its first log line starts
  // and nothing ever joins; paused, it joins it and drops the lines (reclaim
  // reports what fails as errors of its own).
  static std::once_flag once;
  std::call_once(once, [] { common_log_pause(common_log_main()); });
}

std::string json_schema_grammar(const std::string& schema) {
  quiet_common_log();
  try {
    return json_schema_to_grammar(common_json::parse(schema));
  } catch (const std::exception& e) {
    throw ChatError(std::string("the JSON schema makes no grammar: ") + e.what(), "response_format");
  }
}

// --- the reader --------------------------------------------------------------

constexpr int kMaxReplyNesting = 512;

// How deep the text's brackets nest at most, strings and all: an
// overestimate is a reply read as plain content, never a deeper parse.
int nesting(const std::string& text) {
  int depth = 0, most = 0;
  for (const char c : text) {
    if (c == '[' || c == '{' || c == '(') {
      most = std::max(most, ++depth);
    } else if ((c == ']' || c == '}' || c == ')') && depth > 0) {
      --depth;
    }
  }
  return most;
}

struct ChatReader::Impl {
  common_chat_parser_params params;
  std::string text;
  common_chat_msg msg;
  std::vector<std::string> ids;
  bool parses = false;

  std::vector<ChatDelta> advance(const common_chat_msg& next) {
    std::vector<ChatDelta> out;
    for (const common_chat_msg_diff& d : common_chat_msg_diff::compute_diffs(msg, next)) out.push_back(to_delta(d));
    msg = next;
    return out;
  }
  // The parse of the text so far; nothing when the parser cannot read it,
  // or when its brackets nest deeper than kMaxReplyNesting: llama.cpp's
  // reply parser recurses once a level, and a model's reply is text nobody
  // checked (ChatReader's test shows a reply nested 200,000 deep read as
  // content).
  std::optional<common_chat_msg> parse(bool partial) {
    if (nesting(text) > kMaxReplyNesting) return std::nullopt;
    try {
      common_chat_msg next = common_chat_parse(text, partial, params);
      next.set_tool_call_ids(ids, random_call_id);
      return next;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
};

ChatReader::ChatReader() : impl_(std::make_unique<Impl>()) {}
ChatReader::~ChatReader() = default;
ChatReader::ChatReader(ChatReader&&) noexcept = default;
ChatReader& ChatReader::operator=(ChatReader&&) noexcept = default;

bool ChatReader::parses() const { return impl_->parses; }

std::vector<ChatDelta> ChatReader::push(std::string_view text) {
  Impl& r = *impl_;
  r.text += text;
  if (!r.parses) {
    ChatDelta d;
    d.content = std::string(text);
    return {d};
  }
  std::optional<common_chat_msg> next = r.parse(true);
  if (!next || next->empty()) return {};
  return r.advance(*next);
}

ChatReply ChatReader::finish(std::vector<ChatDelta>* rest) {
  Impl& r = *impl_;
  if (r.parses) {
    // A reply cut short (max_tokens) may not parse whole; then as far as it
    // goes, and failing that, the text as it came.
    std::optional<common_chat_msg> next = r.parse(false);
    if (!next) next = r.parse(true);
    if (!next) {
      next = common_chat_msg{};
      next->role = "assistant";
      next->content = r.text;
    }
    std::vector<ChatDelta> owed = r.advance(*next);
    if (rest) *rest = std::move(owed);
  }
  if (!r.parses) r.msg.content = r.text;
  ChatReply out;
  out.content = r.msg.content;
  out.reasoning = r.msg.reasoning_content;
  for (const common_chat_tool_call& c : r.msg.tool_calls) out.tool_calls.push_back({c.id, c.name, c.arguments});
  return out;
}

// --- the bounds -------------------------------------------------------------

// Runs `work` (llama.cpp's common code, which renders the template) under
// jinja::bounds on this thread: the engine's limits at reclaim's sizes, and a
// stop callback that the engine asks every 10 ms of steps for the deadline and
// for `bounds.stop`. A bound that was hit is a TemplateOverBound whatever
// common made of the error it threw (it catches some and goes on; the
// engine's bound stays hit, so it cannot go far). `deterministic` says
// whether the verdict would be the same on another try (not a deadline, not
// a stop).
template <class Work>
auto under_bounds(const TemplateBounds& bounds, size_t input_bytes, bool* deterministic, Work&& work) -> decltype(work()) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + bounds.time;
  bool stopped = false, timed_out = false;
  jinja::limits lim;
  lim.max_bytes = bounds.bytes ? bounds.bytes : TemplateBounds::kBytes + TemplateBounds::kBytesPerInput * static_cast<uint64_t>(input_bytes);
  lim.stop = [&]() -> std::string {
    if (bounds.stop && bounds.stop()) {
      stopped = true;
      return "stopped";
    }
    if (Clock::now() >= deadline) {
      timed_out = true;
      return "the template took more than " + std::to_string(bounds.time.count()) + " ms";
    }
    return {};
  };
  jinja::bounds scope(std::move(lim));
  auto judge = [&]() {
    if (deterministic) *deterministic = !stopped && !timed_out;
    if (stopped) throw TemplateStopped("the chat template's render was stopped: the request was cancelled");
    if (!scope.tripped().empty()) throw TemplateOverBound("the chat template went over a bound: " + scope.tripped());
  };
  try {
    auto result = work();
    judge();
    return result;
  } catch (const TemplateOverBound&) {
    throw;
  } catch (const TemplateStopped&) {
    throw;
  } catch (...) {
    judge();
    throw;
  }
}

// The verdicts on templates that failed the same way each time (they do not
// parse, or reading them goes over a bound), by a digest of the template's
// text (a hostile one may be megabytes). Kept while the process lives, as
// the vetter's verdicts on files are; at most kKept (a process given more
// forgets them all and starts again).
class TemplateVerdicts {
 public:
  static TemplateVerdicts& get() {
    static TemplateVerdicts* v = new TemplateVerdicts;  // never freed: used to the exit
    return *v;
  }
  // Throws the kept verdict on `text`, if there is one.
  void check(const std::string& text) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = failed_.find(key(text));
    if (it == failed_.end()) return;
    if (it->second.over_bound) throw TemplateOverBound(it->second.what);
    throw ChatError(it->second.what);
  }
  void keep(const std::string& text, const std::string& what, bool over_bound) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.size() >= kKept) failed_.clear();
    failed_[key(text)] = {what.substr(0, kMessage), over_bound};
  }

 private:
  static constexpr size_t kKept = 64;
  static constexpr size_t kMessage = 1024;
  struct Verdict {
    std::string what;
    bool over_bound = false;
  };
  // The length and two hashes of different seeds: a template that passed
  // for another would need both to collide at once.
  static std::string key(const std::string& text) {
    const size_t a = std::hash<std::string>{}(text);
    const size_t b = std::hash<std::string>{}(text + '\x01');
    return std::to_string(text.size()) + ':' + std::to_string(a) + ':' + std::to_string(b);
  }
  mutable std::mutex mu_;
  std::unordered_map<std::string, Verdict> failed_;
};

// The text a model's template is read from: the override, or the file's own.
std::string template_text(const llama_model* model, const std::string& override) {
  if (!override.empty()) return override;
  std::string text;
  if (const char* t = llama_model_chat_template(model, nullptr)) text = t;
  if (const char* t = llama_model_chat_template(model, "tool_use")) text += std::string("\0", 1) + t;
  return text;
}

// --- the template -----------------------------------------------------------

struct ChatTemplate::Impl {
  common_chat_templates_ptr templates;
};

ChatTemplate::ChatTemplate(const Model& model, const std::string& override, const TemplateBounds& bounds, bool jinja)
    : impl_(std::make_unique<Impl>()), model_(model) {
  quiet_common_log();
  const bool named = !override.empty() && is_builtin_name(override);
  builtin_ = named || !jinja;
  if (!override.empty() && !named && !looks_like_jinja(override)) {
    throw ChatError("chat template '" + override.substr(0, 40) + "' is neither Jinja text nor one of llama.cpp's built-in ones (" +
                    builtin_chat_templates() + ")");
  }
  fallback_ = override.empty() && llama_model_chat_template(model.get(), nullptr) == nullptr &&
              llama_model_chat_template(model.get(), "tool_use") == nullptr;
  const std::string text = template_text(model.get(), override);
  TemplateVerdicts::get().check(text);
  const std::string which = override.empty() ? "the chat template of '" + model.info().path + "'" : "the chat template given";
  bool deterministic = true;
  try {
    impl_->templates = under_bounds(bounds, 0, &deterministic, [&] { return common_chat_templates_init(model.get(), override); });
  } catch (const TemplateOverBound& e) {
    if (deterministic) TemplateVerdicts::get().keep(text, which + ": " + e.what(), true);
    throw TemplateOverBound(which + ": " + e.what());
  } catch (const TemplateStopped&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = which + " does not parse: " + e.what();
    TemplateVerdicts::get().keep(text, what, false);
    throw ChatError(what);
  }
  if (builtin_ && !named) {
    // The built-in engine picks its template by what the text contains; a
    // text it does not recognise renders nothing.
    const std::string source = common_chat_templates_source(impl_->templates.get());
    const llama_chat_message probe{"user", "x"};
    char out[8];
    if (llama_chat_apply_template(source.c_str(), &probe, 1, true, out, sizeof out) < 0) {
      throw ChatError(which + " is not like any of llama.cpp's built-in templates (" + builtin_chat_templates() +
                      "), which are all it can be rendered with while Jinja is off (jinja = false, --no-jinja)");
    }
  }
}

ChatTemplate::~ChatTemplate() = default;

namespace {

common_chat_continuation to_common(Continuation c) {
  switch (c) {
    case Continuation::none: return COMMON_CHAT_CONTINUATION_NONE;
    case Continuation::automatic: return COMMON_CHAT_CONTINUATION_AUTO;
    case Continuation::reasoning: return COMMON_CHAT_CONTINUATION_REASONING;
    case Continuation::content: return COMMON_CHAT_CONTINUATION_CONTENT;
  }
  return COMMON_CHAT_CONTINUATION_NONE;
}

// Whether the reply is a new turn or the rest of the last assistant message,
// as llama-server decides it (its prefill_assistant on, as by default).
void set_continuation(const ChatRequest& req, common_chat_templates_inputs& in) {
  in.add_generation_prompt = req.add_generation_prompt.value_or(true);
  in.continue_final_message = to_common(req.continue_final);
  const bool assistant_last = in.messages.back().role == "assistant";
  if (req.continue_final == Continuation::none && assistant_last) {
    if (in.messages.size() >= 2 && in.messages[in.messages.size() - 2].role == "assistant") {
      throw ChatError("messages: two assistant messages end the list; only the last one can be continued", "messages");
    }
    in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
    in.add_generation_prompt = false;
  }
  if (in.continue_final_message == COMMON_CHAT_CONTINUATION_NONE) return;
  if (in.add_generation_prompt) {
    throw ChatError("add_generation_prompt and continue_final_message cannot both be true", "continue_final_message");
  }
  if (!assistant_last) throw ChatError("continue_final_message: the last message is not the assistant's", "continue_final_message");
  if (!in.messages.back().tool_calls.empty()) {
    throw ChatError("continue_final_message: the last assistant message has tool calls, which cannot be continued",
                    "continue_final_message");
  }
}

// The chat as llama.cpp's common library reads it, its tools dropped where
// the template cannot offer them.
common_chat_templates_inputs chat_inputs(const ChatRequest& req, bool builtin, const common_chat_templates* templates) {
  common_chat_templates_inputs in;
  try {
    in.messages = common_chat_msgs_parse_oaicompat(common_json::parse(req.messages));
  } catch (const std::exception& e) {
    throw ChatError(std::string("messages: ") + e.what());
  }
  if (in.messages.empty()) throw ChatError("messages: the list is empty");
  for (const ChatTool& t : req.tools) in.tools.push_back({t.name, t.description, t.parameters});
  in.tool_choice = to_common(req.tool_choice);
  in.json_schema = req.json_schema;
  in.use_jinja = !builtin;
  in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default
  if (req.think) in.enable_thinking = *req.think;
  std::map<std::string, bool> caps;
  if (!builtin) caps = common_chat_templates_get_caps(templates);
  auto cap = [&](const char* name) {
    const auto it = caps.find(name);
    return it != caps.end() && it->second;
  };
  // A template without tool calls (a built-in one has none) cannot offer
  // tools. Agents send theirs with every request whatever the model: as
  // llama-server does, the chat is rendered without them and answered in
  // text. Only a request that must get a call is refused, since it cannot
  // be honoured.
  if (!in.tools.empty() && req.tool_choice != ToolChoice::none && !cap("supports_tool_calls")) {
    if (req.tool_choice == ToolChoice::required) {
      throw ChatError(std::string(builtin ? "this model's chat template is a built-in one" : "this model's chat template") +
                          ", which has no tool calls, so a tool call cannot be required (give the model a template that has "
                          "them: chat_template in --config, or --chat-template)",
                      "tool_choice");
    }
    in.tools.clear();
    in.tool_choice = COMMON_CHAT_TOOL_CHOICE_NONE;
  }
  in.parallel_tool_calls = req.parallel_tool_calls.value_or(cap("supports_parallel_tool_calls"));
  set_continuation(req, in);
  return in;
}

}  // namespace

ChatRender ChatTemplate::render(const ChatRequest& req, const TemplateBounds& bounds) const {
  const common_chat_templates_inputs in = chat_inputs(req, builtin_, impl_->templates.get());
  const bool with_tools = !in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE;

  common_chat_params p;
  size_t input_bytes = req.messages.size() + req.json_schema.size();
  for (const ChatTool& t : req.tools) input_bytes += t.name.size() + t.description.size() + t.parameters.size();
  try {
    p = under_bounds(bounds, input_bytes, nullptr, [&] { return common_chat_templates_apply(impl_->templates.get(), in); });
  } catch (const TemplateOverBound&) {
    throw;
  } catch (const TemplateStopped&) {
    throw;
  } catch (const std::exception& e) {
    throw ChatError(std::string("the chat template could not render this chat: ") + e.what());
  }

  const llama_vocab* vocab = model_.vocab();
  ChatRender out;
  out.prompt = std::move(p.prompt);
  out.stops = p.additional_stops;
  for (const std::string& t : p.preserved_tokens) {
    const std::vector<llama_token> ids = tokenize(vocab, t, false, true);
    if (ids.size() == 1) out.preserved_tokens.push_back(ids[0]);
  }
  if (!p.grammar.empty()) {
    out.grammar.gbnf = p.grammar;
    out.grammar.lazy = p.grammar_lazy;
    add_triggers(vocab, p.grammar_triggers, out.preserved_tokens, out.grammar);
    if (out.grammar.lazy && out.grammar.trigger_patterns.empty() && out.grammar.trigger_tokens.empty()) {
      throw Error("the chat template gave a lazy grammar with no trigger");
    }
    if (!out.grammar.lazy && !p.generation_prompt.empty()) {
      out.grammar.prefill = prefill_tokens(vocab, out.prompt, p.generation_prompt);
    }
  }

  ChatReader::Impl& r = *out.reader.impl_;
  r.params = common_chat_parser_params(p);
  r.params.reasoning_format = in.reasoning_format;
  r.params.parse_tool_calls = with_tools;
  try {
    if (!p.parser.empty()) r.params.parser.load(p.parser);
  } catch (const std::exception& e) {
    throw Error(std::string("the chat template's reply parser does not load: ") + e.what());
  }
  // A built-in template's reply is its text; so is one whose format reads
  // nothing out of it.
  r.parses = !builtin_ && (p.format != COMMON_CHAT_FORMAT_CONTENT_ONLY || with_tools || !p.parser.empty());
  r.msg.role = "assistant";
  return out;
}

ChatTemplateCaps chat_template_caps(const std::string& jinja) {
  ChatTemplateCaps caps;
  if (jinja.empty()) return caps;
  try {
    // One set of bounds over the reading and the render that asks about thinking.
    under_bounds(TemplateBounds{}, 0, nullptr, [&] {
      common_chat_templates_ptr t = common_chat_templates_init(nullptr, jinja);
      const std::map<std::string, bool> m = common_chat_templates_get_caps(t.get());
      const auto it = m.find("supports_tool_calls");
      caps.tools = it != m.end() && it->second;
      caps.thinking = common_chat_templates_support_enable_thinking(t.get());
      return 0;
    });
  } catch (const std::exception&) {
    return {};
  }
  return caps;
}

std::string apply_chat_template(const Model& model, const std::vector<ChatMessage>& messages, const std::string& tmpl) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  ChatRequest req;
  req.messages = list.dump();
  return ChatTemplate(model, tmpl).render(req).prompt;
}

}  // namespace reclaim
