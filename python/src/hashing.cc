// engram_store's hashing (hash_ids, Hasher, HashState), Sequence objects,
// EngramError, and the helpers of binding_util.h.
#include <pybind11/eval.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_set>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/format/table.h"
#include "common/hash/engram_hash.h"
#include "common/hash/layout.h"
#include "python/src/array_arg.h"
#include "python/src/binding_util.h"

namespace py = pybind11;

namespace engram::python {
namespace {

// engram_store.HashState: a sequence's normalised-id cache for hash_ids
// (the reference's per-sequence state kept across forward calls).
struct PyHashState {
  SequenceState state;
  bool in_use = false;
};

// A layout given as a Hasher, a Client's layout JSON, a dict in the golden
// `layout` form, a table directory, or a JSON file (a layout, a golden file
// or a manifest).
std::shared_ptr<const NgramHasher> HasherFrom(py::handle layout) {
  if (py::isinstance<NgramHasher>(layout)) return layout.cast<std::shared_ptr<NgramHasher>>();
  absl::StatusOr<HashLayout> l;
  if (py::isinstance<py::dict>(layout)) {
    const std::string text = py::module_::import("json").attr("dumps")(layout).cast<std::string>();
    l = HashLayout::FromJson(text);
  } else if (py::hasattr(layout, "layout_json")) {  // a Client
    l = HashLayout::FromJson(layout.attr("layout_json")().cast<std::string>());
  } else if (py::isinstance<py::str>(layout) || py::hasattr(layout, "__fspath__")) {
    const std::string path = py::str(py::module_::import("os").attr("fspath")(layout));
    if (py::module_::import("os").attr("path").attr("isdir")(path).cast<bool>()) {
      absl::StatusOr<TableManifest> m = TableManifest::Load(path);
      if (m.ok()) {
        l = std::move(m->layout);
      } else {
        l = m.status();
      }
    } else {
      l = HashLayout::FromFile(path);
    }
  } else {
    throw py::type_error(
        "layout must be a Hasher, a Client, a dict (the golden layout form) or a path");
  }
  return Check(NgramHasher::Create(Check(std::move(l))));
}

py::array_t<int64_t> HashIds(py::handle layout, py::handle token_ids, int64_t start_pos,
                             py::handle mask, py::handle states) {
  std::shared_ptr<const NgramHasher> h = HasherFrom(layout);
  const TokenBatchArgs args(token_ids, mask);
  const int64_t B = args.batch(), T = args.tokens_per_row();
  std::vector<std::unique_ptr<SequenceState>> fresh;
  std::vector<SequenceState*> seqs;
  if (states.is_none()) {
    if (start_pos != 0) {
      throw py::value_error("start_pos > 0 continues sequences: pass their HashState objects");
    }
    for (int64_t b = 0; b < B; ++b) {
      fresh.push_back(std::make_unique<SequenceState>());
      seqs.push_back(fresh.back().get());
    }
  } else {
    std::unordered_set<PyHashState*> seen;
    for (py::handle s : states) {
      if (!py::isinstance<PyHashState>(s)) throw py::type_error("states must be HashState objects");
      PyHashState* p = s.cast<PyHashState*>();
      if (!seen.insert(p).second) throw py::value_error("a HashState is given twice");
      seqs.push_back(&p->state);
    }
    if (static_cast<int64_t>(seqs.size()) != B) {
      throw py::value_error(absl::StrCat(seqs.size(), " states for ", B, " sequences"));
    }
  }
  py::array_t<int64_t> out(
      {B, T, static_cast<int64_t>(h->n_layers()), static_cast<int64_t>(h->n_cols())});
  absl::Status st;
  {
    py::gil_scoped_release nogil;
    st = h->HashBatch(seqs, start_pos, T, args.token_ids(), args.mask(),
                      reinterpret_cast<RowId*>(out.mutable_data()));
  }
  Check(st);
  return out;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  py::dict scope;
  py::exec(R"(
class EngramError(RuntimeError):
    """An engram-store error: .code is the status code's name ("UNAVAILABLE",
    "DEADLINE_EXCEEDED", "INVALID_ARGUMENT", ...), .message its text."""
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
)",
           py::globals(), scope);
  py::object cls = scope["EngramError"];
  cls.attr("__module__") = "engram_store";
  m.attr("EngramError") = cls;
  static py::handle error_class = cls.release();  // lives as long as the module
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object err =
          error_class(absl::StatusCodeToString(e.status.code()), std::string(e.status.message()));
      PyErr_SetObject(error_class.ptr(), err.ptr());
    }
  });
}

std::vector<PySequence*> SequencesArg(py::handle sequences, int64_t B) {
  std::vector<PySequence*> out;
  if (!py::isinstance<py::list>(sequences) && !py::isinstance<py::tuple>(sequences)) {
    throw py::type_error("sequences must be a list of Sequence objects (Client.new_sequence())");
  }
  out.reserve(static_cast<size_t>(std::max<int64_t>(B, 0)));
  // A sequence given twice is found by a mark set on each as it is taken
  // (no set to allocate per call); every mark is cleared on the way out.
  struct ClearMarks {
    std::vector<PySequence*>& taken;
    ~ClearMarks() {
      for (PySequence* p : taken) p->marked = false;
    }
  } clear{out};
  for (py::handle s : sequences) {
    py::detail::make_caster<PySequence> caster;
    if (!caster.load(s, /*convert=*/false) || s.is_none()) {
      throw py::type_error("sequences must be Sequence objects (Client.new_sequence())");
    }
    PySequence* p = py::detail::cast_op<PySequence*>(caster);
    if (p->in_use || p->marked) {
      throw py::value_error(
          absl::StrCat("sequence ", out.size(), " is given twice or in use by another prefetch"));
    }
    p->marked = true;
    out.push_back(p);
  }
  if (static_cast<int64_t>(out.size()) != B) {
    throw py::value_error(absl::StrCat(out.size(), " sequences for token_ids of ", B, " rows"));
  }
  return out;
}

py::object RowIdsArray(std::span<const RowId> ids, int64_t B, int64_t T, int64_t L, int64_t C) {
  py::array_t<int64_t> out({B, T, L, C});
  std::memcpy(out.mutable_data(), ids.data(), ids.size_bytes());
  return out;
}

void RegisterHashing(py::module_& m) {
  py::class_<PySequence>(m, "Sequence")
      .def_property_readonly("length", [](const PySequence& s) { return s.seq->length(); })
      .def("reset", [](PySequence& s) { s.seq->Reset(); });

  py::class_<PyHashState>(m, "HashState")
      .def(py::init<>())
      .def_property_readonly("length", [](const PyHashState& s) { return s.state.length(); })
      .def("reset", [](PyHashState& s) { s.state.Reset(); });

  py::class_<NgramHasher, std::shared_ptr<NgramHasher>>(m, "Hasher")
      .def(py::init([](py::handle layout) {
             return std::const_pointer_cast<NgramHasher>(HasherFrom(layout));
           }),
           py::arg("layout"))
      .def_property_readonly("n_layers", &NgramHasher::n_layers)
      .def_property_readonly("n_cols", &NgramHasher::n_cols)
      .def_property_readonly("vocab_size",
                             [](const NgramHasher& h) { return h.layout().vocab_size; })
      .def_property_readonly("table_rows",
                             [](const NgramHasher& h) { return h.layout().table_rows; });

  m.def("hash_ids", &HashIds, py::arg("layout"), py::arg("token_ids"), py::arg("start_pos") = 0,
        py::arg("mask") = py::none(), py::arg("states") = py::none(),
        "The bit-exact Engram hash alone: int64[B, T] token ids -> int64[B, T, n_layers, n_cols] "
        "global row ids. layout: a Hasher, Client, layout dict, table directory or JSON file; "
        "states: one HashState per sequence to continue (start_pos > 0).");
}

}  // namespace engram::python
