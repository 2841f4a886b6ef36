// Pieces the engram_store module's bindings share: status -> EngramError,
// Sequence objects and their checks, row id arrays.
#ifndef ENGRAM_PYTHON_SRC_BINDING_UTIL_H_
#define ENGRAM_PYTHON_SRC_BINDING_UTIL_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/engram_client.h"

namespace engram::python {

// Thrown by Check; the module turns it into EngramError(code, message).
struct StatusError {
  absl::Status status;
};

inline void Check(const absl::Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <typename T>
T Check(absl::StatusOr<T> s) {
  if (!s.ok()) throw StatusError{s.status()};
  return std::move(*s);
}

// Defines engram_store.EngramError (a RuntimeError with .code, the status
// code's name such as "UNAVAILABLE", and .message) and the translation of
// StatusError into it.
void RegisterErrors(pybind11::module_& m);

// engram_store.Sequence: one sequence's n-gram state. in_use is set while a
// prefetch hashes it (with the GIL released), so no two calls share it.
struct PySequence {
  std::unique_ptr<Sequence> seq;
  bool in_use = false;
  bool marked = false;  // SequencesArg's, while it checks one call's list
};

// The B Sequence objects of a prefetch: TypeError for a non-Sequence,
// ValueError for a count other than B or a sequence given twice or in use
// by another thread's prefetch.
std::vector<PySequence*> SequencesArg(pybind11::handle sequences, int64_t B);

// Marks sequences in use for its life. REQUIRES: GIL held at both ends.
class SequencesInUse {
 public:
  explicit SequencesInUse(const std::vector<PySequence*>& seqs) : seqs_(seqs) {
    for (PySequence* s : seqs_) s->in_use = true;
  }
  ~SequencesInUse() {
    for (PySequence* s : seqs_) s->in_use = false;
  }

 private:
  const std::vector<PySequence*>& seqs_;
};

// A new numpy int64 array [B, T, L, C] holding a copy of `ids`.
pybind11::object RowIdsArray(std::span<const RowId> ids, int64_t B, int64_t T, int64_t L,
                             int64_t C);

// engram_store.Sequence, engram_store.HashState, engram_store.Hasher and
// engram_store.hash_ids (hashing.cc).
void RegisterHashing(pybind11::module_& m);

}  // namespace engram::python

#endif  // ENGRAM_PYTHON_SRC_BINDING_UTIL_H_
