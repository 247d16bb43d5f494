#include "llama/server/api.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace llm_server {
namespace {

using nlohmann::json;

std::string Dump(const json& j) {
  // Generated text is valid UTF-8 (the tokenizer's decoder replaces what is not); replace is a
  // second guard: a response is never an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* TypeOf(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

[[noreturn]] void Bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "' " + what, param);
}

int64_t Int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  // An integer past 2^64 is parsed as a float: say it is out of range, not that it is no integer.
  if (v.is_number_float() && std::isfinite(v.get<double>()) &&
      std::nearbyint(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) >= 0x1p63) {
    Bad(param, range);
  }
  if (!v.is_number_integer()) Bad(param, "must be an integer, not " + std::string(v.type_name()));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) Bad(param, range);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    Bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not " +
                   std::to_string(x));
  }
  return x;
}

bool Bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) Bad(param, "must be true or false, not " + std::string(v.type_name()));
  return v.get<bool>();
}

void ReadPrompt(const json& p, CompletionRequest* r) {
  if (p.is_string()) {
    r->prompt_is_text = true;
    r->prompt_text = p.get<std::string>();
    if (r->prompt_text.empty()) Bad("prompt", "is empty");
    return;
  }
  // A list of token ids; a list of prompts (batch in one request) is not taken in this server.
  if (!p.is_array() || p.empty()) {
    Bad("prompt", "must be a string or a non-empty list of token ids");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_number_integer()) {
      Bad("prompt", "must be a string or a list of token ids (one prompt per request): item " +
                        std::to_string(i) + " is " + p[i].type_name());
    }
    r->prompt_ids.push_back(Int(p[i], "prompt", 0, std::numeric_limits<int64_t>::max()));
  }
}

void ReadStop(const json& s, CompletionRequest* r) {
  if (s.is_null()) return;
  if (s.is_string()) {
    r->stop.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= 4) {
    for (const json& x : s) {
      if (!x.is_string()) Bad("stop", "must be a string or a list of at most 4 strings");
      r->stop.push_back(x.get<std::string>());
    }
  } else {
    Bad("stop", "must be a string or a list of at most 4 strings");
  }
  for (const std::string& x : r->stop) {
    if (x.empty()) Bad("stop", "holds an empty string");
  }
}

// Sampling: temperature (left out or 0: greedy), top_p (left out: 1) and seed (left out: a
// random one).
void ReadSampling(const json& j, CompletionRequest* r) {
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& t = j["temperature"];
    if (!t.is_number() || !(t.get<double>() >= 0.0 && t.get<double>() <= 2.0)) {
      Bad("temperature", "must be a number in [0, 2]");
    }
    r->temperature = t.get<double>();
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& p = j["top_p"];
    if (!p.is_number() || !(p.get<double>() > 0.0 && p.get<double>() <= 1.0)) {
      Bad("top_p", "must be a number in (0, 1]");
    }
    r->top_p = p.get<double>();
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    r->seed = Int(j["seed"], "seed", std::numeric_limits<int64_t>::min(),
                  std::numeric_limits<int64_t>::max());
    r->seed_given = true;
  }
  if (j.contains("n") && !j["n"].is_null()) Int(j["n"], "n", 1, 1);
}

// OpenAI's fields that would change the result and that this server does not implement: refused
// naming the field rather than answered as if absent. Their neutral values pass (clients send
// them by default); fields that do not change the result (user, seed when greedy) pass.
void CheckUnsupported(const json& j) {
  auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  const char* why = " is not implemented by this server";
  if (given("logprobs") && !(j["logprobs"].is_boolean() && !j["logprobs"].get<bool>())) {
    Bad("logprobs", std::string("(log probabilities)") + why);
  }
  if (given("top_logprobs")) Bad("top_logprobs", std::string("(log probabilities)") + why);
  if (given("echo") && !(j["echo"].is_boolean() && !j["echo"].get<bool>())) {
    Bad("echo", std::string("(the prompt echoed in the text)") + why);
  }
  if (given("suffix") && !(j["suffix"].is_string() && j["suffix"].get<std::string>().empty())) {
    Bad("suffix", std::string("(text after the completion)") + why);
  }
  if (given("best_of")) Int(j["best_of"], "best_of", 1, 1);
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    if (given(k) && !(j[k].is_number() && j[k].get<double>() == 0.0)) {
      Bad(k, std::string("must be 0: penalties") + why);
    }
  }
  if (given("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty())) {
    Bad("logit_bias", std::string("must be empty: logit biases") + why);
  }
  // Other servers' extensions that change the result (vLLM's, llama.cpp's), and chat's options.
  if (given("repetition_penalty") &&
      !(j["repetition_penalty"].is_number() && j["repetition_penalty"].get<double>() == 1.0)) {
    Bad("repetition_penalty", std::string("must be 1: penalties") + why);
  }
  if (given("min_tokens") && !(j["min_tokens"].is_number_integer() && j["min_tokens"] == 0)) {
    Bad("min_tokens", std::string("must be 0") + why);
  }
  if (given("add_generation_prompt") &&
      !(j["add_generation_prompt"].is_boolean() && j["add_generation_prompt"].get<bool>())) {
    Bad("add_generation_prompt", std::string("must be true") + why);
  }
  if (given("continue_final_message") &&
      !(j["continue_final_message"].is_boolean() && !j["continue_final_message"].get<bool>())) {
    Bad("continue_final_message", std::string("must be false") + why);
  }
  if (given("audio")) Bad("audio", std::string("(audio output)") + why);
  if (given("modalities") && j["modalities"] != json::array({"text"})) {
    Bad("modalities", std::string("other than [\"text\"]") + why);
  }
}

json Usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// One choice: a completion's text, a chat completion's message (whole) or delta (a chunk; the
// first one names the role).
json Choice(const CompletionRequest& req, const Piece& p, bool chunk, bool first) {
  json c = {{"index", 0},
            {"logprobs", nullptr},
            {"finish_reason", p.finish_reason.empty() ? json(nullptr) : json(p.finish_reason)}};
  if (!req.chat) {
    c["text"] = p.text;
  } else if (!chunk) {
    c["message"] = {{"role", "assistant"}, {"content", p.text}};
  } else {
    c["delta"] = json::object();
    if (first) c["delta"]["role"] = "assistant";
    if (!p.text.empty() || first) c["delta"]["content"] = p.text;
  }
  if (req.return_token_ids) c["token_ids"] = p.ids;
  return c;
}

// A chat message's content: a string, or text parts ([{"type": "text", "text": ...}]) joined.
std::string MessageContent(const json& m, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (!m.contains("content") || m["content"].is_null()) {
    if (m.contains("tool_calls"))
      Bad(param, "is null with tool_calls: tool calls are not implemented");
    return "";
  }
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) Bad(param, "must be a string or a list of text parts");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", std::string()) != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      Bad(param,
          "holds a part other than {\"type\": \"text\", \"text\": ...}: only text is served");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// The messages as the template gets them: role, content and name (when given), checked.
std::string ReadMessages(const json& j) {
  if (!j.contains("messages")) throw ApiError(400, "'messages' is required", "messages");
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty() || ms.size() > 4096) {
    Bad("messages", "must be a list of 1 to 4096 messages");
  }
  json out = json::array();
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& m = ms[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) Bad(at, "must be an object with 'role' and 'content'");
    if (!m.contains("role") || !m["role"].is_string() || m["role"].get<std::string>().empty()) {
      Bad(at + ".role", "must be a non-empty string");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      Bad(at + ".tool_calls", "is not implemented by this server");
    }
    json one = {{"role", m["role"]}, {"content", MessageContent(m, i)}};
    if (m.contains("name") && m["name"].is_string()) one["name"] = m["name"];
    out.push_back(std::move(one));
  }
  return Dump(out);
}

}  // namespace

std::string ApiError::Body() const {
  return Dump({{"error",
                {{"message", what()},
                 {"type", TypeOf(status_)},
                 {"param", param_.empty() ? json(nullptr) : json(param_)},
                 {"code", nullptr}}}});
}

namespace {

json Object(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

// The fields completions and chat completions share.
void ReadCommon(const json& j, CompletionRequest* out) {
  CompletionRequest& r = *out;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) Bad("model", "must be a string");
    r.model = j["model"].get<std::string>();
  }
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if ((r.chat || k == std::string("max_tokens")) && j.contains(k) && !j[k].is_null()) {
      r.max_tokens = Int(j[k], k, 1, int64_t{1} << 30);
      r.max_tokens_given = true;
    }
  }
  if (j.contains("stream") && !j["stream"].is_null()) r.stream = Bool(j["stream"], "stream");
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    r.ignore_eos = Bool(j["ignore_eos"], "ignore_eos");
  }
  if (j.contains("return_token_ids") && !j["return_token_ids"].is_null()) {
    r.return_token_ids = Bool(j["return_token_ids"], "return_token_ids");
  }
  if (j.contains("stop")) ReadStop(j["stop"], &r);
  ReadSampling(j, &r);
  CheckUnsupported(j);
}

}  // namespace

CompletionRequest ParseCompletion(const std::string& body) {
  const json j = Object(body);
  CompletionRequest r;
  if (!j.contains("prompt")) throw ApiError(400, "'prompt' is required", "prompt");
  ReadPrompt(j["prompt"], &r);
  ReadCommon(j, &r);
  return r;
}

CompletionRequest ParseChat(const std::string& body) {
  const json j = Object(body);
  CompletionRequest r;
  r.chat = true;
  r.prompt_is_text = true;
  r.messages = ReadMessages(j);
  for (const char* k : {"tools", "functions", "tool_choice", "function_call"}) {
    if (j.contains(k) && !j[k].is_null()) Bad(k, "(tool calls) is not implemented by this server");
  }
  if (j.contains("response_format") && !j["response_format"].is_null() &&
      !(j["response_format"].is_object() &&
        j["response_format"].value("type", std::string()) == "text")) {
    Bad("response_format", "other than {\"type\": \"text\"} is not implemented by this server");
  }
  ReadCommon(j, &r);
  return r;
}

std::string CompletionBody(const std::string& id, int64_t created, const std::string& model,
                           const CompletionRequest& req, const Piece& all, int64_t prompt_tokens) {
  return Dump({{"id", id},
               {"object", req.chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", model},
               {"choices", json::array({Choice(req, all, false, false)})},
               {"usage", Usage(prompt_tokens, static_cast<int64_t>(all.ids.size()))}});
}

std::string ChunkEvent(const std::string& id, int64_t created, const std::string& model,
                       const CompletionRequest& req, const Piece& piece, int64_t prompt_tokens,
                       int64_t completion_tokens) {
  const bool first = completion_tokens == static_cast<int64_t>(piece.ids.size());
  json j = {{"id", id},
            {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({Choice(req, piece, true, first)})}};
  if (!piece.finish_reason.empty()) j["usage"] = Usage(prompt_tokens, completion_tokens);
  return "data: " + Dump(j) + "\n\n";
}

std::string ModelsBody(const std::string& model, int64_t created) {
  return Dump(
      {{"object", "list"},
       {"data",
        json::array(
            {{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "disco"}}})}});
}

}  // namespace llm_server
