#include "bench/engram_bench/engram_bench_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace engram::bench {
namespace {

constexpr char kSectionHeading[] = "## Side by side (engram-bench)";
constexpr char kBeginMarker[] = "<!-- engram-bench:begin";
constexpr char kEndMarker[] = "<!-- engram-bench:end -->";

const Measurement* Find(const Report& r, const std::string& table, const std::string& stream,
                        const std::string& system, int connections) {
  for (const Measurement& m : r.rows) {
    if (m.table == table && m.stream == stream && m.system == system &&
        (m.connections == connections || m.connections == 0)) {
      return &m;
    }
  }
  return nullptr;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

std::string Rate(double v) {
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// One target: the measured value, the bound and its direction.
struct Target {
  std::string what;
  double value;
  double bound;
  bool at_least;
};

std::vector<Target> Targets(const Report& r, const Headline& h) {
  return {
      {"ours / Redis rows/s", h.redis_ratio, 3.0, true},
      {"ours / bare TCP rows/s", h.tcp_ratio, 0.85, true},
      {"ours / bare TCP p99 per step", h.p99_ratio, 1.5, false},
      {"ours on disk / raw O_DIRECT QD32 reads/s", h.disk_ratio, 0.80, true},
      {absl::StrFormat("wire bytes per row (bound 1.05 x (%.0f + 8))", r.headline_row_bytes),
       h.wire_bytes_per_row, 1.05 * (r.headline_row_bytes + 8), false},
  };
}

std::string Verdict(const Target& t) {
  if (t.value <= 0) return "not measured";
  const bool met = t.at_least ? t.value >= t.bound : t.value <= t.bound;
  const double off = t.at_least ? 1 - t.value / t.bound : t.value / t.bound - 1;
  return met ? absl::StrFormat("met (%.0f%% margin)", -off * 100)
             : absl::StrFormat("MISSED by %.0f%%", off * 100);
}

struct Cells {
  std::string table, stream, system, conn, rows, mb, p50, p99, p999, srv, cli, wire;
};

Cells CellsOf(const Measurement& m) {
  Cells c;
  c.table = m.table;
  c.stream = m.stream;
  c.system = m.system;
  c.conn = m.connections == 0 ? "-" : absl::StrCat(m.connections);
  c.rows = Rate(m.rows_per_second());
  c.mb = absl::StrFormat("%.1f", m.mb_per_second());
  c.p50 = absl::StrFormat("%.3f", m.latency_ms(0.50));
  c.p99 = absl::StrFormat("%.3f", m.latency_ms(0.99));
  c.p999 = absl::StrFormat("%.3f", m.latency_ms(0.999));
  const double srv = m.server_cpu_per_mrow();
  c.srv = srv < 0 ? "-" : absl::StrFormat("%.3f", srv);
  c.cli = absl::StrFormat("%.3f", m.client_cpu_per_mrow());
  const double wire = m.wire_bytes_per_row();
  c.wire = wire < 0 ? "-" : absl::StrFormat("%.1f", wire);
  return c;
}

// Ours (1 shard) against each peer, per table, stream and connection count.
struct RatioRow {
  std::string table, stream;
  int connections;
  double redis, tcp, memory, p99_tcp;
};

std::vector<RatioRow> StreamRatios(const Report& r) {
  std::vector<RatioRow> out;
  for (const Measurement& m : r.rows) {
    if (m.system != kOursOneShard) continue;
    auto rate = [&](const char* peer) {
      const Measurement* p = Find(r, m.table, m.stream, peer, m.connections);
      return p == nullptr ? 0 : Ratio(m.rows_per_second(), p->rows_per_second());
    };
    const Measurement* tcp = Find(r, m.table, m.stream, kBareTcp, m.connections);
    out.push_back({m.table, m.stream, m.connections, rate(kRedis), rate(kBareTcp),
                   rate(kMemoryGather),
                   tcp == nullptr ? 0 : Ratio(m.latency_ms(0.99), tcp->latency_ms(0.99))});
  }
  return out;
}

std::string RatioCell(double v) { return v > 0 ? absl::StrFormat("%.2f", v) : "-"; }

// Engram systems reading from disk against the raw read ceiling.
std::vector<std::string> DiskLines(const Report& r) {
  std::vector<std::string> out;
  const Measurement* raw =
      Find(r, r.disk_table, "4 KiB reads", absl::StrCat("raw O_DIRECT QD", kHeadlineQueueDepth), 0);
  for (const Measurement& m : r.rows) {
    if (m.table != r.disk_table || m.served.disk_rows <= 0) continue;
    const double raw_rate = raw == nullptr ? 0 : raw->rows_per_second();
    const double reads_per_second = m.loop.seconds > 0 ? m.served.disk_reads / m.loop.seconds : 0;
    out.push_back(absl::StrFormat(
        "%s, %s: %s distinct rows/s read from disk = %.2f x raw O_DIRECT QD%d (%s rows/s "
        "delivered; %.0f%% of the rows sent came from disk); %s SST block reads/s = %.2f x raw "
        "(%.2f per disk row: rows of one step share blocks)",
        m.system, m.stream, Rate(m.disk_rows_per_second()),
        Ratio(m.disk_rows_per_second(), raw_rate), kHeadlineQueueDepth, Rate(m.rows_per_second()),
        100 * Ratio(m.served.disk_rows, m.served.wire_rows), Rate(reads_per_second),
        Ratio(reads_per_second, raw_rate), Ratio(m.served.disk_reads, m.served.disk_rows)));
  }
  return out;
}

// Where an engram step's time goes: the RPCs (client-observed, send to
// response) and the servers' handler time inside them.
struct StepSplit {
  const Measurement* m;
  double step_ms, rpcs_per_step, rpc_ms, handler_ms;
};

std::vector<StepSplit> StepSplits(const Report& r) {
  std::vector<StepSplit> out;
  for (const Measurement& m : r.rows) {
    if (m.served.rpcs <= 0 || m.loop.requests == 0) continue;
    const double steps = static_cast<double>(m.loop.requests);
    out.push_back({&m, 1e3 * m.loop.seconds / steps, m.served.rpcs / steps,
                   1e3 * Ratio(m.served.rpc_seconds, m.served.rpcs),
                   1e3 * Ratio(m.served.handler_seconds, m.served.lookups)});
  }
  return out;
}

std::string ReuseCell(double v) { return v < 0 ? "-" : absl::StrFormat("%.0f", v); }

}  // namespace

Headline ComputeHeadline(const Report& r) {
  Headline h;
  const Measurement* ours = Find(r, r.hot_table, kHeadlineStream, kOursOneShard, 1);
  const Measurement* redis = Find(r, r.hot_table, kHeadlineStream, kRedis, 1);
  const Measurement* tcp = Find(r, r.hot_table, kHeadlineStream, kBareTcp, 1);
  const Measurement* memory = Find(r, r.hot_table, kHeadlineStream, kMemoryGather, 0);
  const Measurement* tail = Find(r, r.disk_table, kHeadlineStream, kOursTail, 1);
  const Measurement* raw =
      Find(r, r.disk_table, "4 KiB reads", absl::StrCat("raw O_DIRECT QD", kHeadlineQueueDepth), 0);
  if (ours != nullptr) {
    if (redis != nullptr) h.redis_ratio = Ratio(ours->rows_per_second(), redis->rows_per_second());
    if (tcp != nullptr) {
      h.tcp_ratio = Ratio(ours->rows_per_second(), tcp->rows_per_second());
      h.p99_ratio = Ratio(ours->latency_ms(0.99), tcp->latency_ms(0.99));
    }
    if (memory != nullptr) {
      h.memory_ratio = Ratio(ours->rows_per_second(), memory->rows_per_second());
    }
    h.wire_bytes_per_row = std::max(0.0, ours->wire_bytes_per_row());
  }
  if (tail != nullptr && raw != nullptr) {
    h.disk_ratio = Ratio(tail->disk_rows_per_second(), raw->rows_per_second());
  }
  return h;
}

void PrintReport(const Report& r, std::FILE* out) {
  std::fprintf(out, "\n%-14s %-15s %-30s %4s %8s %7s %8s %8s %8s %7s %7s %6s\n", "table", "stream",
               "system", "conn", "rows/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms", "srv s/M",
               "cli s/M", "wire B");
  for (const Measurement& m : r.rows) {
    const Cells c = CellsOf(m);
    std::fprintf(out, "%-14s %-15s %-30s %4s %8s %7s %8s %8s %8s %7s %7s %6s\n", c.table.c_str(),
                 c.stream.c_str(), c.system.c_str(), c.conn.c_str(), c.rows.c_str(), c.mb.c_str(),
                 c.p50.c_str(), c.p99.c_str(), c.p999.c_str(), c.srv.c_str(), c.cli.c_str(),
                 c.wire.c_str());
  }
  std::fprintf(out,
               "(rows/s: rows delivered in request order, repeats included; p50/p99/p99.9 per "
               "step (per read for raw O_DIRECT); srv/cli s/M: CPU seconds per million rows of "
               "the server processes or threads / of this process without them; wire B: bytes "
               "on the wire per distinct row sent)\n\n");

  std::fprintf(out, "%-14s %-15s %9s %11s %7s %7s %9s\n", "table", "stream", "ids/step",
               "unique/step", "top-1%", "top-10%", "reuse med");
  for (const ShapeRow& s : r.shapes) {
    std::fprintf(out, "%-14s %-15s %9.0f %11.0f %6.1f%% %6.1f%% %9s\n", s.table.c_str(),
                 s.stream.c_str(), s.shape.ids_per_step, s.shape.unique_per_step,
                 100 * s.shape.top1_share, 100 * s.shape.top10_share,
                 ReuseCell(s.shape.reuse_median).c_str());
  }
  std::fprintf(out,
               "(top-x%%: share of lookups on the x%% most looked-up rows of the table; "
               "reuse med: median lookups between two lookups of one row)\n\n");

  std::fprintf(out, "ours (%s) against the peers, same table, stream and connections:\n",
               kOursOneShard);
  std::fprintf(out, "%-14s %-15s %4s %8s %8s %8s %9s\n", "table", "stream", "conn", "/redis",
               "/TCP", "/memory", "p99/TCP");
  for (const RatioRow& q : StreamRatios(r)) {
    std::fprintf(out, "%-14s %-15s %4d %8s %8s %8s %9s\n", q.table.c_str(), q.stream.c_str(),
                 q.connections, RatioCell(q.redis).c_str(), RatioCell(q.tcp).c_str(),
                 RatioCell(q.memory).c_str(), RatioCell(q.p99_tcp).c_str());
  }
  for (const std::string& line : DiskLines(r)) std::fprintf(out, "%s\n", line.c_str());
  std::fprintf(out, "\n%-14s %-15s %-30s %4s %8s %9s %8s %10s\n", "engram steps", "stream",
               "system", "conn", "step ms", "RPCs/step", "RPC ms", "handler ms");
  for (const StepSplit& q : StepSplits(r)) {
    std::fprintf(out, "%-14s %-15s %-30s %4d %8.3f %9.2f %8.3f %10.3f\n", q.m->table.c_str(),
                 q.m->stream.c_str(), q.m->system.c_str(), q.m->connections, q.step_ms,
                 q.rpcs_per_step, q.rpc_ms, q.handler_ms);
  }
  std::fprintf(out,
               "(means; RPC ms: the client's, send to response; handler ms: the server's, "
               "parse + gather or disk reads, before the send)\n");

  const Headline h = ComputeHeadline(r);
  std::fprintf(out, "\ntargets (%s, %s, 1 shard, 1 connection each):\n", r.hot_table.c_str(),
               kHeadlineStream);
  for (const Target& t : Targets(r, h)) {
    std::fprintf(out, "  %-48s %8.3f  (%s %.3f: %s)\n", t.what.c_str(), t.value,
                 t.at_least ? ">=" : "<=", t.bound, Verdict(t).c_str());
  }
  std::fprintf(out, "  %-48s %8.3f  (context)\n", "ours / memory gather rows/s", h.memory_ratio);
  std::fprintf(out,
               "bench: redis_ratio=%.3f tcp_ratio=%.3f disk_ratio=%.3f wire_bytes_per_row=%.1f\n",
               h.redis_ratio, h.tcp_ratio, h.disk_ratio, h.wire_bytes_per_row);
  std::fflush(out);
}

std::string MarkdownSection(const Report& r, const std::string& plot_png) {
  std::ostringstream md;
  md << kBeginMarker << " (written by engram-bench --doc; `make bench` rewrites this part) -->\n";
  md << "```sh\n" << r.command << "\n```\n";
  for (const std::string& line : r.setup) md << line << "  \n";
  const Headline h = ComputeHeadline(r);
  md << "\n**Targets** (" << r.hot_table << ", " << kHeadlineStream
     << ", 1 shard, 1 connection each; tail: " << r.disk_table << ")\n\n";
  md << "| target | measured | bound | verdict |\n|---|---|---|---|\n";
  for (const Target& t : Targets(r, h)) {
    md << absl::StrFormat("| %s | %.3f | %s %.3f | %s |\n", t.what, t.value, t.at_least ? "≥" : "≤",
                          t.bound, Verdict(t));
  }
  md << absl::StrFormat("| ours / memory gather rows/s (context) | %.3f | | |\n\n", h.memory_ratio);
  if (!plot_png.empty()) {
    md << "![rows/s and p99 per step against the step size](" << plot_png << ")\n\n";
  }
  md << "| table | stream | system | conn | rows/s | MB/s | p50 ms | p99 ms | p99.9 ms "
        "| server CPU s/M rows | client CPU s/M rows | wire B/row |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Measurement& m : r.rows) {
    const Cells c = CellsOf(m);
    md << "| " << c.table << " | " << c.stream << " | " << c.system << " | " << c.conn << " | "
       << c.rows << " | " << c.mb << " | " << c.p50 << " | " << c.p99 << " | " << c.p999 << " | "
       << c.srv << " | " << c.cli << " | " << c.wire << " |\n";
  }
  md << "\n";
  for (const std::string& line : DiskLines(r)) md << "- " << line << "\n";
  md << "\n| engram | stream | conn | step ms | RPCs/step | RPC ms | server handler ms |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const StepSplit& q : StepSplits(r)) {
    md << absl::StrFormat("| %s, %s | %s | %d | %.3f | %.2f | %.3f | %.3f |\n", q.m->system,
                          q.m->table, q.m->stream, q.m->connections, q.step_ms, q.rpcs_per_step,
                          q.rpc_ms, q.handler_ms);
  }
  md << "\n| ours (1 shard) vs | stream | conn | ÷ Redis | ÷ bare TCP | ÷ memory | p99 ÷ TCP |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const RatioRow& q : StreamRatios(r)) {
    md << "| " << q.table << " | " << q.stream << " | " << q.connections << " | "
       << RatioCell(q.redis) << " | " << RatioCell(q.tcp) << " | " << RatioCell(q.memory) << " | "
       << RatioCell(q.p99_tcp) << " |\n";
  }
  md << "\n| id stream | table | ids/step | distinct rows/step | top-1% rows' share | "
        "top-10% rows' share | reuse distance (median) |\n|---|---|---|---|---|---|---|\n";
  for (const ShapeRow& s : r.shapes) {
    md << absl::StrFormat("| %s | %s | %.0f | %.0f | %.1f%% | %.1f%% | %s |\n", s.stream, s.table,
                          s.shape.ids_per_step, s.shape.unique_per_step, 100 * s.shape.top1_share,
                          100 * s.shape.top10_share, ReuseCell(s.shape.reuse_median));
  }
  md << kEndMarker << "\n";
  return md.str();
}

absl::Status WriteDocSection(const std::string& path, const std::string& generated) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  in.close();
  std::vector<std::string> block;
  std::istringstream g(generated);
  for (std::string line; std::getline(g, line);) block.push_back(line);

  auto starts = [](const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
  };
  size_t heading = lines.size(), begin = lines.size(), end = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i] == kSectionHeading) heading = i;
    if (heading < lines.size() && i > heading) {
      if (starts(lines[i], "## ")) break;  // the next section
      if (starts(lines[i], kBeginMarker)) begin = i;
      if (starts(lines[i], kEndMarker) && begin < lines.size()) {
        end = i;
        break;
      }
    }
  }
  std::vector<std::string> out;
  if (heading == lines.size()) {  // a new section before the first other one
    size_t at = 0;
    while (at < lines.size() && !starts(lines[at], "## ")) ++at;
    out.assign(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(at));
    if (!out.empty() && !out.back().empty()) out.push_back("");
    out.push_back(kSectionHeading);
    out.push_back("");
    out.insert(out.end(), block.begin(), block.end());
    out.push_back("");
    out.insert(out.end(), lines.begin() + static_cast<std::ptrdiff_t>(at), lines.end());
  } else if (begin < lines.size() && end < lines.size()) {
    out.assign(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(begin));
    out.insert(out.end(), block.begin(), block.end());
    out.insert(out.end(), lines.begin() + static_cast<std::ptrdiff_t>(end) + 1, lines.end());
  } else {  // the heading without a generated part: it goes right below
    out.assign(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(heading) + 1);
    out.push_back("");
    out.insert(out.end(), block.begin(), block.end());
    out.insert(out.end(), lines.begin() + static_cast<std::ptrdiff_t>(heading) + 1, lines.end());
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::trunc);
    for (const std::string& line : out) o << line << '\n';
    o.close();
    if (!o) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot replace ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status WritePlotData(const Report& r, const std::string& path) {
  // Systems and streams of the hot table with one connection, in run order.
  std::vector<std::string> systems, streams;
  std::vector<double> ids;
  auto add = [](std::vector<std::string>& v, const std::string& s) {
    for (const std::string& x : v) {
      if (x == s) return false;
    }
    v.push_back(s);
    return true;
  };
  for (const Measurement& m : r.rows) {
    if (m.table != r.hot_table || m.connections > 1) continue;
    add(systems, m.system);
    if (add(streams, m.stream)) ids.push_back(m.rows_per_request);
  }
  std::ofstream out(path, std::ios::trunc);
  out << "ids\tstep";
  for (const std::string& s : systems) out << '\t' << s << '\t' << s << " p99";
  out << '\n';
  for (size_t k = 0; k < streams.size(); ++k) {
    out << ids[k] << '\t' << streams[k];
    for (const std::string& s : systems) {
      const Measurement* m = Find(r, r.hot_table, streams[k], s, 1);
      if (m == nullptr) {
        out << "\t?\t?";
      } else {
        out << '\t' << m->rows_per_second() << '\t' << m->latency_ms(0.99);
      }
    }
    out << '\n';
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace engram::bench
