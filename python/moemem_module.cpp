// moemem._core: the command line run in-process for the Python package (python/moemem/__init__.py).
// The package turns keyword arguments into the CLI's flags and this runs them through the same
// parser and the same writers as the moemem executable, so a dict from Python holds the bytes the
// CLI prints. A model given as a dict arrives as config.json text and is read by the same loader.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cli/cli.hpp"
#include "cli/embedded.hpp"
#include "moemem/config.hpp"
#include "moemem/errors.hpp"

namespace py = pybind11;

namespace {

// Text from the C++ side as a Python str. Every message moemem writes is UTF-8, but a value it
// echoes could hold bytes that are not; those become U+FFFD instead of a UnicodeDecodeError.
py::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// The error of a run that ended with exit code 2: (field, value, accepted), or None where the
// command line itself was malformed (CLI11's message is then on stderr).
py::object fields_of(const moemem::InputError& e) {
  return py::make_tuple(text(e.field()), text(e.value()), text(e.accepted()));
}

// Runs `moemem args...`; `model_json` (config.json text, named `model_name`) replaces --model.
// Returns (exit code, stdout, stderr, (field, value, accepted) or None).
py::tuple run(const std::vector<std::string>& args, const std::optional<std::string>& model_json,
              const std::string& model_name) {
  moemem::cli::Embedding embedding;
  if (model_json) {
    try {
      embedding.model = moemem::parse_hf_config(*model_json, model_name);
    } catch (const moemem::InputError& e) {
      return py::make_tuple(moemem::kExitBadInput, text(""), text(std::string("moemem: error: ") + e.what() + "\n"),
                            fields_of(e));
    }
  }
  std::vector<const char*> argv{"moemem"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = 0;
  {
    py::gil_scoped_release release;  // pure C++ from here; search runs threads of its own
    code = moemem::cli::run(static_cast<int>(argv.size()), argv.data(), out, err, embedding);
  }
  return py::make_tuple(code, text(out.str()), text(err.str()),
                        embedding.error ? fields_of(*embedding.error) : py::object(py::none()));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "moemem's command line, run in-process (use the moemem package's functions)";
  m.def("run", &run, py::arg("args"), py::arg("model_json") = py::none(), py::arg("model_name") = "dict",
        "Runs `moemem args...` in-process: (exit code, stdout, stderr, (field, value, accepted) or None)");
  m.attr("version") = MOEMEM_VERSION;
}
