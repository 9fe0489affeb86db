// The web calculator's entry (web/, built by scripts/web-build.sh with emscripten): the command
// line run in-process, as the Python module runs it (python/moemem_module.cpp), so the page shows
// the bytes the CLI prints for the same flags. Native builds leave this file out.
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "cli/embedded.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"

namespace {

nlohmann::json error_of(const moemem::InputError& e) {
  return {{"field", e.field()}, {"value", e.value()}, {"accepted", e.accepted()}};
}

// Runs `moemem args...` for a request {"args": [...], "model_json": config.json text or null,
// "model_name": its name}; the model, when given, replaces --model as in the Python module.
nlohmann::json run_request(const std::string& request_text) {
  moemem::cli::Embedding embedding;
  std::vector<std::string> args;
  try {
    const auto request = nlohmann::json::parse(request_text);
    args = request.at("args").get<std::vector<std::string>>();
    if (const auto it = request.find("model_json"); it != request.end() && it->is_string()) {
      embedding.model = moemem::parse_hf_config(it->get<std::string>(), request.value("model_name", std::string("config.json")));
    }
  } catch (const moemem::InputError& e) {
    return {{"code", moemem::kExitBadInput}, {"stdout", ""}, {"stderr", std::string("moemem: error: ") + e.what() + "\n"},
            {"error", error_of(e)}};
  } catch (const nlohmann::json::exception& e) {
    return {{"code", moemem::kExitBadInput}, {"stdout", ""}, {"stderr", std::string("moemem: bad request: ") + e.what() + "\n"},
            {"error", nullptr}};
  }
  std::vector<const char*> argv{"moemem"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = 0;
  try {
    code = moemem::cli::run(static_cast<int>(argv.size()), argv.data(), out, err, embedding);
  } catch (const std::exception& e) {  // a bug, as the executable's main() reports it: exit code 3
    err << "moemem: internal error: " << e.what() << "\n";
    code = 3;
  }
  return {{"code", code}, {"stdout", out.str()}, {"stderr", err.str()},
          {"error", embedding.error ? error_of(*embedding.error) : nlohmann::json(nullptr)}};
}

}  // namespace

// The page's one call: the request as JSON text in, {"code", "stdout", "stderr", "error"} as JSON
// text out. The returned text lives until the next call.
extern "C" const char* moemem_run(const char* request_json) {
  static std::string reply;
  reply = run_request(request_json ? request_json : "").dump();
  return reply.c_str();
}
