// The engram_store Python module: EngramClient (client/engram_client.h) for
// Python inference engines. docs/python.md is the user's guide.
//
// Every call that can block (Client creation, prefetch, wait, lookup_into,
// a step's release) releases the GIL; arrays are written in place, never
// through a staging copy. Errors of the client are EngramError(code,
// message); bad arguments are TypeError / ValueError raised before any work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/engram_client.h"
#include "common/codec/row_encoding.h"
#include "common/net/shard_addresses.h"
#include "python/src/array_arg.h"
#include "python/src/binding_util.h"

namespace py = pybind11;

namespace engram::python {
namespace {

// Nanoseconds spent inside EngramClient / Step calls made from Python
// (prefetch, wait, a step's release): what bench_python.py subtracts from
// its step times to see the binding's own cost. Two clock reads a call.
std::atomic<int64_t> g_client_ns{0};

// Runs f() and adds its duration to g_client_ns.
template <typename F>
auto Timed(F&& f) {
  const absl::Time t0 = absl::Now();
  auto r = f();
  g_client_ns.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - t0), std::memory_order_relaxed);
  return r;
}

RowFormat ParseFormat(const std::string& f) {
  if (f == "bf16") return RowFormat::kBf16;
  if (f == "f32") return RowFormat::kF32;
  if (f == "raw") return RowFormat::kRaw;
  throw py::value_error(
      absl::StrCat("format must be \"bf16\", \"f32\" or \"raw\", not \"", f, "\""));
}

// The dtypes an output array of `format` may have.
void RequireOutDtype(const ArrayArg& out, RowFormat format) {
  switch (format) {
    case RowFormat::kBf16:
      return out.RequireDtype({DType::kUint16, DType::kBf16},
                              "uint16 or torch.bfloat16 for format \"bf16\"");
    case RowFormat::kF32:
      return out.RequireDtype({DType::kFloat32}, "float32 for format \"f32\"");
    case RowFormat::kRaw:
      return out.RequireDtype({DType::kUint8}, "uint8 for format \"raw\"");
  }
}

absl::Duration DurationArg(py::handle v, const char* name) {
  if (v.is_none()) return absl::InfiniteDuration();
  double seconds;
  if (py::hasattr(v, "total_seconds")) {
    seconds = v.attr("total_seconds")().cast<double>();
  } else if (PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr())) {
    seconds = v.cast<double>();
  } else {
    throw py::type_error(absl::StrCat(name, " must be seconds (a float), a timedelta or None"));
  }
  if (std::isinf(seconds) && seconds > 0) return absl::InfiniteDuration();
  return absl::Seconds(seconds);
}

py::object DurationValue(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return py::none();
  return py::float_(absl::ToDoubleSeconds(d));
}

std::vector<std::vector<std::string>> ShardsArg(py::handle shards) {
  if (shards.is_none()) return {};
  if (py::isinstance<py::str>(shards))
    return Check(ParseShardAddresses(shards.cast<std::string>()));
  std::vector<std::vector<std::string>> out;
  for (py::handle s : shards) {
    if (py::isinstance<py::str>(s)) {
      out.push_back({s.cast<std::string>()});
    } else {
      out.push_back(s.cast<std::vector<std::string>>());
    }
  }
  return out;
}

// Sets one ClientOptions field from a keyword argument; TypeError for a
// name that is no field.
void SetOption(ClientOptions& o, const std::string& k, py::handle v) {
  if (k == "shard_map_path") {
    o.shard_map_path = v.cast<std::string>();
  } else if (k == "shard_addresses" || k == "shards") {
    o.shard_addresses = ShardsArg(v);
  } else if (k == "version") {
    o.version = v.cast<uint64_t>();
  } else if (k == "transport") {
    const std::string t = v.cast<std::string>();
    if (t != "row_stream" && t != "grpc") {
      throw py::value_error("transport must be \"row_stream\" or \"grpc\"");
    }
    o.transport = t == "grpc" ? Transport::kGrpc : Transport::kRowStream;
  } else if (k == "rpc_deadline") {
    o.rpc_deadline = DurationArg(v, "rpc_deadline");
  } else if (k == "step_deadline") {
    o.step_deadline = DurationArg(v, "step_deadline");
  } else if (k == "max_rows_per_rpc") {
    o.max_rows_per_rpc = v.cast<uint32_t>();
  } else if (k == "channels_per_replica") {
    o.channels_per_replica = v.cast<int>();
  } else if (k == "hedge") {
    o.hedge = v.cast<bool>();
  } else if (k == "hedge_delay") {
    o.hedge_delay = DurationArg(v, "hedge_delay");
  } else if (k == "min_hedge_delay") {
    o.min_hedge_delay = DurationArg(v, "min_hedge_delay");
  } else if (k == "pipeline_layers") {
    o.pipeline_layers = v.cast<bool>();
  } else if (k == "max_reconnect_backoff") {
    o.max_reconnect_backoff = DurationArg(v, "max_reconnect_backoff");
  } else if (k == "tls_ca_file") {
    o.tls_ca_file = v.cast<std::string>();
  } else if (k == "tls_cert_file") {
    o.tls_cert_file = v.cast<std::string>();
  } else if (k == "tls_key_file") {
    o.tls_key_file = v.cast<std::string>();
  } else if (k == "tls_server_name") {
    o.tls_server_name = v.cast<std::string>();
  } else if (k == "auth_token") {
    o.auth_token = v.cast<std::string>();
  } else if (k == "http2_bdp_probe") {
    o.http2_bdp_probe = v.cast<bool>();
  } else if (k == "http2_window_bytes") {
    o.http2_window_bytes = v.cast<uint32_t>();
  } else if (k == "worker_cache_bytes") {
    o.worker_cache_bytes = v.cast<uint64_t>();
  } else if (k == "worker_cache_profiles") {
    o.worker_cache_profiles = v.cast<std::vector<std::string>>();
  } else if (k == "sequence_capacity") {
    o.sequence_capacity = v.cast<int64_t>();
  } else {
    throw py::type_error(absl::StrCat("Client() got an unexpected keyword argument '", k, "'"));
  }
}

// Every keyword argument of Client() with its default (ClientOptions'),
// durations in seconds (None = infinite).
py::dict DefaultOptions() {
  const ClientOptions o;
  py::dict d;
  d["shard_map_path"] = o.shard_map_path;
  d["shards"] = o.shard_addresses;
  d["version"] = o.version;
  d["transport"] = "row_stream";
  d["rpc_deadline"] = DurationValue(o.rpc_deadline);
  d["step_deadline"] = DurationValue(o.step_deadline);
  d["max_rows_per_rpc"] = o.max_rows_per_rpc;
  d["channels_per_replica"] = o.channels_per_replica;
  d["hedge"] = o.hedge;
  d["hedge_delay"] = DurationValue(o.hedge_delay);
  d["min_hedge_delay"] = DurationValue(o.min_hedge_delay);
  d["pipeline_layers"] = o.pipeline_layers;
  d["max_reconnect_backoff"] = DurationValue(o.max_reconnect_backoff);
  d["tls_ca_file"] = o.tls_ca_file;
  d["tls_cert_file"] = o.tls_cert_file;
  d["tls_key_file"] = o.tls_key_file;
  d["tls_server_name"] = o.tls_server_name;
  d["auth_token"] = o.auth_token;
  d["http2_bdp_probe"] = o.http2_bdp_probe;
  d["http2_window_bytes"] = o.http2_window_bytes;
  d["worker_cache_bytes"] = o.worker_cache_bytes;
  d["worker_cache_profiles"] = o.worker_cache_profiles;
  d["sequence_capacity"] = o.sequence_capacity;
  return d;
}

// The Python Client. Steps hold a reference to it, so the EngramClient
// outlives every Step.
struct PyClient {
  std::unique_ptr<EngramClient> client;

  void CheckLayer(int layer) const {
    if (layer < 0 || layer >= client->n_layers()) {
      throw py::value_error(
          absl::StrCat("layer ", layer, " is not in 0..", client->n_layers() - 1));
    }
  }
};

// A prefetched step. One thread at a time runs a call on it (mu); the GIL
// is released while it waits and while it is released.
struct PyStep {
  std::optional<Step> step;
  py::object client;  // the PyClient: keeps the EngramClient alive
  std::mutex mu;

  ~PyStep() { Close(); }
  EngramClient& Client() const { return *client.cast<PyClient&>().client; }
  Step& Get() {
    if (!step.has_value()) throw py::value_error("the step is closed");
    return *step;
  }
  // Cancels what is still in flight and gives the buffers back.
  void Close() {
    if (!step.has_value()) return;
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(mu);
    Timed([&] {
      step.reset();
      return 0;
    });
  }
};

// Writes `format` rows of `layer` for the step into out ([B, T, n_cols,
// ...] with the trailing dimensions holding one row).
py::object StepWait(PyStep& self, int layer, py::handle out_obj, const std::string& format_name) {
  Step& step = self.Get();
  EngramClient& c = self.Client();
  self.client.cast<PyClient&>().CheckLayer(layer);
  const RowFormat format = ParseFormat(format_name);
  ArrayArg out(out_obj, "out", /*writable=*/true);
  RequireOutDtype(out, format);
  const int64_t per_row =
      static_cast<int64_t>(c.OutputRowBytes(layer, format)) / (format == RowFormat::kRaw   ? 1
                                                               : format == RowFormat::kF32 ? 4
                                                                                           : 2);
  const std::vector<int64_t>& s = out.shape();
  int64_t trailing = 1;
  for (size_t i = 3; i < s.size(); ++i) trailing *= s[i];
  if (s.size() < 4 || s[0] != step.batch() || s[1] != step.tokens_per_sequence() ||
      s[2] != c.n_cols() || trailing != per_row) {
    throw py::value_error(absl::StrCat("out has shape ", out.ShapeString(), "; layer ", layer,
                                       " in format \"", format_name, "\" needs [", step.batch(),
                                       ", ", step.tokens_per_sequence(), ", ", c.n_cols(), ", ",
                                       per_row, "]"));
  }
  absl::Status st;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(self.mu);
    st = Timed([&] {
      return self.step.has_value()  // closed meanwhile by another thread?
                 ? self.step->Wait(layer, format, {static_cast<uint8_t*>(out.data()), out.bytes()})
                 : absl::FailedPreconditionError("the step was closed");
    });
  }
  Check(st);
  return py::reinterpret_borrow<py::object>(out_obj);
}

std::unique_ptr<PyStep> Prefetch(py::object client_obj, py::handle sequences,
                                 py::handle start_positions, py::handle token_ids,
                                 py::handle mask) {
  PyClient& self = client_obj.cast<PyClient&>();
  const TokenBatchArgs args(token_ids, mask);
  const int64_t B = args.batch(), T = args.tokens_per_row();
  std::vector<int64_t> starts;
  if (PyLong_Check(start_positions.ptr())) {
    starts.assign(static_cast<size_t>(B), start_positions.cast<int64_t>());
  } else if (PyObject_CheckBuffer(start_positions.ptr())) {
    ArrayArg sp(start_positions, "start_positions", /*writable=*/false);
    sp.RequireDtype({DType::kInt64}, "int64");
    sp.RequireShape({B});
    const int64_t* p = static_cast<const int64_t*>(sp.data());
    starts.assign(p, p + B);
  } else {
    starts = start_positions.cast<std::vector<int64_t>>();
  }
  std::vector<PySequence*> seqs = SequencesArg(sequences, B);
  if (starts.size() != static_cast<size_t>(B)) {
    throw py::value_error(
        absl::StrCat("start_positions has ", starts.size(), " entries for ", B, " sequences"));
  }
  std::vector<Sequence*> raw(seqs.size());
  for (size_t b = 0; b < seqs.size(); ++b) raw[b] = seqs[b]->seq.get();
  SequencesInUse in_use(seqs);
  StepInput in;
  in.sequences = raw;
  in.start_positions = starts;
  in.tokens_per_sequence = T;
  in.token_ids = {args.token_ids(), static_cast<size_t>(B * T)};
  if (args.mask() != nullptr) in.mask = {args.mask(), static_cast<size_t>(B * T)};
  absl::StatusOr<Step> step;
  {
    py::gil_scoped_release nogil;
    step = Timed([&] { return self.client->Prefetch(in); });
  }
  auto out = std::make_unique<PyStep>();
  out->step.emplace(std::move(Check(std::move(step))));
  out->client = std::move(client_obj);
  return out;
}

void LookupInto(PyClient& self, int layer, py::handle ids_obj, py::handle out_obj,
                const std::string& format_name) {
  self.CheckLayer(layer);
  const RowFormat format = ParseFormat(format_name);
  ArrayArg ids(ids_obj, "ids", /*writable=*/false);
  ids.RequireDtype({DType::kInt64}, "int64");
  ArrayArg out(out_obj, "out", /*writable=*/true);
  RequireOutDtype(out, format);
  std::vector<int64_t> want = ids.shape();
  want.push_back(static_cast<int64_t>(self.client->OutputRowBytes(layer, format)) /
                 (format == RowFormat::kRaw   ? 1
                  : format == RowFormat::kF32 ? 4
                                              : 2));
  out.RequireShape(want);
  absl::Status st;
  {
    py::gil_scoped_release nogil;
    st = self.client->LookupInto(
        layer, {static_cast<const RowId*>(ids.data()), static_cast<size_t>(ids.elements())}, format,
        {static_cast<uint8_t*>(out.data()), out.bytes()});
  }
  Check(st);
}

py::dict Stats(const PyClient& self) {
  const ClientStats s = self.client->stats();
  py::dict d;
  d["steps"] = s.steps;
  d["ids"] = s.ids;
  d["unique_rows"] = s.unique_rows;
  d["local_hits"] = s.local_hits;
  d["rows_fetched"] = s.rows_fetched;
  d["bytes_received"] = s.bytes_received;
  d["bytes_sent"] = s.bytes_sent;
  d["rpcs"] = s.rpcs;
  d["stream_answers"] = s.stream_answers;
  d["retries"] = s.retries;
  d["hedges"] = s.hedges;
  d["failed_rpcs"] = s.failed_rpcs;
  d["shard_latency_sum_seconds"] = s.shard_latency_sum_seconds;
  d["shard_rpcs"] = s.shard_rpcs;
  return d;
}

}  // namespace
}  // namespace engram::python

PYBIND11_MODULE(engram_store, m) {
  using namespace engram;
  using namespace engram::python;
  m.doc() = "engram-store client: Engram rows from the shards, into your arrays (docs/python.md)";
  RegisterErrors(m);
  RegisterHashing(m);
  m.def("default_options", &DefaultOptions,
        "Every keyword argument of Client() with its default (the C++ ClientOptions').");

  py::class_<PyClient>(m, "Client")
      .def(py::init([](const std::string& table_dir, py::object shards, py::kwargs kw) {
             ClientOptions o;
             o.table_dir = table_dir;
             o.shard_addresses = ShardsArg(shards);
             for (auto [k, v] : kw) SetOption(o, k.cast<std::string>(), v);
             absl::StatusOr<std::unique_ptr<EngramClient>> c;
             {
               py::gil_scoped_release nogil;
               c = EngramClient::Create(std::move(o));
             }
             auto out = std::make_unique<PyClient>();
             out->client = Check(std::move(c));
             return out;
           }),
           py::arg("table_dir"), py::arg("shards") = py::none(),
           "Client(table_dir, shards=[[addr, ...], ...], **options): every ClientOptions field "
           "but metrics_registry is a keyword argument (engram_store.default_options()).")
      .def("new_sequence",
           [](const PyClient& self) {
             auto s = std::make_unique<PySequence>();
             s->seq = self.client->NewSequence();
             return s;
           })
      .def("prefetch", &Prefetch, py::arg("sequences"), py::arg("start_positions"),
           py::arg("token_ids"), py::arg("mask") = py::none(),
           "Hashes the step's int64[B, T] token ids and sends its lookups; returns a Step at once.")
      .def("lookup_into", &LookupInto, py::arg("layer"), py::arg("ids"), py::arg("out"),
           py::arg("format") = "raw",
           "Rows of `layer` by global row id: ids int64[..., H] -> out[..., H, row] (blocks).")
      .def("stats", &Stats)
      .def_property_readonly("n_layers", [](const PyClient& s) { return s.client->n_layers(); })
      .def_property_readonly("n_cols", [](const PyClient& s) { return s.client->n_cols(); })
      .def_property_readonly("n_shards", [](const PyClient& s) { return s.client->n_shards(); })
      .def("row_bytes",
           [](const PyClient& s, int layer) {
             s.CheckLayer(layer);
             return s.client->row_bytes(layer);
           })
      .def("head_dim",
           [](const PyClient& s, int layer) {
             s.CheckLayer(layer);
             return s.client->head_dim(layer);
           })
      .def("encoding",
           [](const PyClient& s, int layer) {
             s.CheckLayer(layer);
             return StoredEncodingName(s.client->encoding(layer));
           })
      .def_property_readonly("worker_cache_bytes",
                             [](const PyClient& s) { return s.client->worker_cache_bytes(); })
      .def("recent_p95", [](const PyClient& s) { return DurationValue(s.client->RecentP95()); })
      .def("layout_json", [](const PyClient& s) { return s.client->layout().json; });

  py::class_<PyStep>(m, "Step")
      .def_property_readonly("batch", [](PyStep& s) { return s.Get().batch(); })
      .def_property_readonly("tokens_per_sequence",
                             [](PyStep& s) { return s.Get().tokens_per_sequence(); })
      .def_property_readonly("unique_rows", [](PyStep& s) { return s.Get().unique_rows(); })
      .def("wait", &StepWait, py::arg("layer"), py::arg("out"), py::arg("format") = "bf16",
           "Blocks (GIL released) until the layer's rows are in, writes them into out, returns "
           "out.")
      .def("arrived",
           [](PyStep& s, int layer) {
             s.Get();  // ValueError once closed
             s.client.cast<PyClient&>().CheckLayer(layer);
             absl::StatusOr<bool> in;
             {
               py::gil_scoped_release nogil;
               std::lock_guard<std::mutex> l(s.mu);  // waits only for another thread's call
               in = s.step.has_value() ? s.step->Arrived(layer)
                                       : absl::FailedPreconditionError("the step was closed");
             }
             return Check(std::move(in));
           })
      .def("fetch_latency",
           [](PyStep& s, int layer) {
             s.Get();  // ValueError once closed
             s.client.cast<PyClient&>().CheckLayer(layer);
             absl::Duration d;
             {
               py::gil_scoped_release nogil;
               std::lock_guard<std::mutex> l(s.mu);
               d = s.step.has_value() ? s.step->FetchLatency(layer) : absl::InfiniteDuration();
             }
             return DurationValue(d);
           })
      .def("row_ids",
           [](PyStep& s) {
             return RowIdsArray(s.Get().row_ids(), s.Get().batch(), s.Get().tokens_per_sequence(),
                                s.Client().n_layers(), s.Client().n_cols());
           })
      .def("close", &PyStep::Close)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStep& s, py::args) { s.Close(); });

  // decode_rows(encoding, raw, head_dim, format="f32"): rows stored in
  // `encoding` (uint8[..., row_bytes]) to float32 or bf16 (uint16) values
  // [..., head_dim], as Wait decodes them (common/codec/row_encoding.h).
  m.def(
      "decode_rows",
      [](const std::string& encoding_name, py::handle raw_obj, int head_dim,
         const std::string& format_name) -> py::object {
        absl::StatusOr<RowEncoding> e = ParseRowEncoding(encoding_name);
        Check(e.status());
        const RowFormat format = ParseFormat(format_name);
        if (format == RowFormat::kRaw) throw py::value_error("format must be \"f32\" or \"bf16\"");
        const int scale_block = *e == RowEncoding::kFp8 ? 32 : 0;
        absl::StatusOr<int> rb = EncodedRowBytes(*e, head_dim, scale_block);
        Check(rb.status());
        ArrayArg raw(raw_obj, "raw", false);
        raw.RequireDtype({DType::kUint8}, "uint8");
        if (raw.bytes() % static_cast<size_t>(*rb) != 0) {
          throw py::value_error(absl::StrCat("raw holds ", raw.bytes(),
                                             " bytes, not a multiple of ", encoding_name, "'s ",
                                             *rb, "-byte rows"));
        }
        const size_t n = raw.bytes() / static_cast<size_t>(*rb);
        const auto* src = static_cast<const uint8_t*>(raw.data());
        const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(n), head_dim};
        if (format == RowFormat::kF32) {
          py::array_t<float> out(shape);
          DecodeRows(*e, src, n, head_dim, scale_block, out.mutable_data());
          return out;
        }
        py::array_t<uint16_t> out(shape);
        DecodeRows(*e, src, n, head_dim, scale_block, out.mutable_data());
        return out;
      },
      py::arg("encoding"), py::arg("raw"), py::arg("head_dim"), py::arg("format") = "f32",
      "Rows stored in `encoding` (uint8, whole rows) decoded to float32[n, head_dim] or, with "
      "format=\"bf16\", uint16[n, head_dim], bit for bit as Step.wait decodes them "
      "(e4m3_e8m0 rows take scale blocks of 32).");

  m.def(
      "_client_seconds", [] { return static_cast<double>(g_client_ns.load()) * 1e-9; },
      "Seconds spent inside EngramClient calls made from Python so far (for the benchmark).");

  // The same decode loop as bench_python.py drives from Python, in C++:
  // per step Prefetch of tokens[s] (int64[B, 1]) at position s, then Wait
  // of every layer into outs[layer] (bf16). Returns each step's seconds.
  m.def("_cpp_decode_loop", [](PyClient& self, py::handle tokens_obj, py::list outs) {
    ArrayArg tokens(tokens_obj, "tokens", false);
    tokens.RequireDtype({DType::kInt64}, "int64");
    if (tokens.shape().size() != 3 || tokens.shape()[2] != 1) {
      throw py::value_error("tokens must be int64[steps, B, 1]");
    }
    const int64_t steps = tokens.shape()[0], B = tokens.shape()[1];
    std::vector<std::unique_ptr<ArrayArg>> out;
    for (py::handle o : outs) out.push_back(std::make_unique<ArrayArg>(o, "out", true));
    if (static_cast<int>(out.size()) != self.client->n_layers()) {
      throw py::value_error("one out array per layer");
    }
    std::vector<double> seconds;
    absl::Status failed;
    {
      py::gil_scoped_release nogil;
      std::vector<std::unique_ptr<Sequence>> seqs;
      std::vector<Sequence*> raw;
      for (int64_t b = 0; b < B; ++b) {
        seqs.push_back(self.client->NewSequence());
        raw.push_back(seqs.back().get());
      }
      std::vector<int64_t> starts(static_cast<size_t>(B), 0);
      const int64_t* t = static_cast<const int64_t*>(tokens.data());
      for (int64_t s = 0; s < steps && failed.ok(); ++s) {
        const absl::Time t0 = absl::Now();
        {  // the step is released inside the timed span, as Python's `del step`
          StepInput in;
          in.sequences = raw;
          std::fill(starts.begin(), starts.end(), s);
          in.start_positions = starts;
          in.token_ids = {t + s * B, static_cast<size_t>(B)};
          absl::StatusOr<Step> step = self.client->Prefetch(in);
          absl::Status st = step.status();
          for (int l = 0; st.ok() && l < self.client->n_layers(); ++l) {
            st = step->Wait(l, RowFormat::kBf16,
                            {static_cast<uint8_t*>(out[l]->data()), out[l]->bytes()});
          }
          failed = st;
        }
        seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
      }
    }
    Check(failed);
    return seconds;
  });
}
