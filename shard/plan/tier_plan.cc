#include "shard/plan/tier_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

double TokensPerSecond(const PlanModelOptions& m, int batch) {
  return m.tokens_per_second > 0 ? m.tokens_per_second
                                 : static_cast<double>(batch) / (m.blocks * m.block_us * 1e-6);
}

double StepsPerSecond(const PlanModelOptions& m, int batch) {
  return m.workers * TokensPerSecond(m, batch) / batch;
}

// Layers in the order the model needs them (by block; ties by index).
std::vector<int> NeedOrder(std::span<const int64_t> layer_blocks) {
  std::vector<int> order(layer_blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return layer_blocks[a] < layer_blocks[b]; });
  return order;
}

// Each layer's exposed seconds of one step from its arrival (the top of
// tier_plan.h), into *exposed; returns their sum.
double ExposedFromArrivals(std::span<const int64_t> layer_blocks, std::span<const int> need_order,
                           double block_seconds, const std::vector<double>& arrival,
                           std::vector<double>* exposed) {
  exposed->assign(layer_blocks.size(), 0.0);
  double waited = 0;
  for (int l : need_order) {
    const double needed = static_cast<double>(layer_blocks[l]) * block_seconds + waited;
    const double e = std::max(0.0, arrival[l] - needed);
    (*exposed)[l] = e;
    waited += e;
  }
  return waited;
}

}  // namespace

const char* FetchOrderName(FetchOrder order) {
  return order == FetchOrder::kSequential ? "sequential" : "deadline";
}

absl::StatusOr<FetchOrder> ParseFetchOrder(std::string_view name) {
  if (name == "deadline") return FetchOrder::kDeadlineFirst;
  if (name == "sequential") return FetchOrder::kSequential;
  return absl::InvalidArgumentError(absl::StrCat("fetch order \"",
                                                 absl::string_view(name.data(), name.size()),
                                                 "\" is not deadline or sequential"));
}

absl::Status PlanModelOptions::Validate(std::span<const int64_t> layer_blocks) const {
  auto bad = [](const char* field, double v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", v, " must be ", want));
  };
  if (!(disk_iops > 0) || !std::isfinite(disk_iops)) return bad("disk_iops", disk_iops, "> 0");
  if (!(disk_latency_us >= 0) || !std::isfinite(disk_latency_us)) {
    return bad("disk_latency_us", disk_latency_us, ">= 0");
  }
  if (!(network_gbps > 0) || !std::isfinite(network_gbps)) {
    return bad("network_gbps", network_gbps, "> 0");
  }
  if (!(rtt_us >= 0) || !std::isfinite(rtt_us)) return bad("rtt_us", rtt_us, ">= 0");
  if (!(block_us > 0) || !std::isfinite(block_us)) return bad("block_us", block_us, "> 0");
  if (!(tokens_per_second >= 0) || !std::isfinite(tokens_per_second)) {
    return bad("tokens_per_second", tokens_per_second, ">= 0 (0 = back-to-back decode)");
  }
  if (workers < 1) return bad("workers", workers, ">= 1");
  int64_t last = 0;
  for (int64_t b : layer_blocks) last = std::max(last, b);
  if (blocks <= last) {
    return absl::InvalidArgumentError(absl::StrCat("blocks ", blocks,
                                                   " must exceed the last Engram layer's block (",
                                                   last, ", the layout's engram_layer_ids)"));
  }
  return absl::OkStatus();
}

FetchModel::FetchModel(const PlanModelOptions& options, std::vector<int64_t> layer_blocks,
                       std::vector<uint32_t> row_bytes, const std::vector<double>& utilization)
    : o_(options),
      layer_blocks_(std::move(layer_blocks)),
      row_bytes_(std::move(row_bytes)),
      link_bytes_per_second_(options.network_gbps * 1e9 / 8),
      step_seconds_(options.blocks * options.block_us * 1e-6) {
  const double others = static_cast<double>(o_.workers - 1) / o_.workers;
  for (double u : utilization) free_iops_.push_back(o_.disk_iops * (1 - others * u));
  need_order_ = NeedOrder(layer_blocks_);
}

double FetchModel::Step(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
                        std::vector<double>* exposed) const {
  std::vector<double> arrival;
  if (o_.fetch_order == FetchOrder::kSequential) {
    SequentialArrivals(rows, tail, &arrival);
  } else {
    DeadlineArrivals(rows, tail, &arrival);
  }
  return ExposedFromArrivals(layer_blocks_, need_order_, o_.block_us * 1e-6, arrival, exposed);
}

void FetchModel::DeadlineArrivals(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
                                  std::vector<double>* arrival) const {
  const size_t L = layer_blocks_.size(), K = free_iops_.size();
  arrival->assign(L, 0.0);
  std::vector<double> read(K, 0.0);  // tail rows each shard has read, in need order
  double sent = 0;                   // the worker's link: every layer needed so far
  for (int l : need_order_) {
    double slowest = 0;
    uint64_t asked = 0;
    for (size_t s = 0; s < K; ++s) {
      const uint32_t n = rows[l * K + s], t = tail[l * K + s];
      asked += n;
      const double send = static_cast<double>(n) * row_bytes_[l] / link_bytes_per_second_;
      read[s] += t;
      const double disk = t > 0 ? o_.disk_latency_us * 1e-6 + read[s] / free_iops_[s] : 0.0;
      slowest = std::max(slowest, disk + send);
      sent += send;
    }
    if (asked > 0) (*arrival)[l] = o_.rtt_us * 1e-6 + std::max(slowest, sent);
  }
}

void FetchModel::SequentialArrivals(std::span<const uint32_t> rows, std::span<const uint32_t> tail,
                                    std::vector<double>* arrival) const {
  const size_t L = layer_blocks_.size(), K = free_iops_.size();
  arrival->assign(L, 0.0);
  double at = 0;  // layer l leaves when layer l - 1 has arrived
  for (size_t l = 0; l < L; ++l) {
    double slowest = 0, all_sends = 0;
    uint64_t asked = 0;
    for (size_t s = 0; s < K; ++s) {
      const uint32_t n = rows[l * K + s], t = tail[l * K + s];
      asked += n;
      const double send = static_cast<double>(n) * row_bytes_[l] / link_bytes_per_second_;
      const double disk = t > 0 ? o_.disk_latency_us * 1e-6 + t / free_iops_[s] : 0.0;
      slowest = std::max(slowest, disk + send);
      all_sends += send;
    }
    if (asked > 0) at += o_.rtt_us * 1e-6 + std::max(slowest, all_sends);
    (*arrival)[l] = at;
  }
}

TrafficPlan PlanTraffic(const TierReplay& replay, const PlanModelOptions& model) {
  TrafficPlan t;
  const int batch = replay.options().batch;
  t.tokens_per_second = TokensPerSecond(model, batch);
  t.steps_per_second = StepsPerSecond(model, batch);
  const uint32_t K = replay.map().n_shards;
  const int L = replay.n_layers();
  const double link = model.network_gbps * 1e9 / 8;
  const double steps = static_cast<double>(std::max<uint64_t>(1, replay.steps()));
  t.rows_per_step.assign(K, 0);
  double worker_bytes = 0;
  for (uint32_t s = 0; s < K; ++s) {
    double bytes = 0, rows = 0;
    for (uint64_t step = 0; step < replay.steps(); ++step) {
      for (int l = 0; l < L; ++l) {
        const uint32_t n = replay.step_rows(step, l, s);
        rows += n;
        bytes += static_cast<double>(n) * replay.map().row_bytes[l];
      }
    }
    t.rows_per_step[s] = rows / steps;
    worker_bytes += bytes / steps;
    t.max_shard_link_utilization =
        std::max(t.max_shard_link_utilization, bytes / steps * t.steps_per_second / link);
  }
  t.worker_link_utilization = worker_bytes * t.tokens_per_second / batch / link;
  return t;
}

absl::StatusOr<BudgetPlan> PlanBudget(const TierReplay& replay, const BudgetReplay& budget,
                                      const PlanModelOptions& model) {
  const HashLayout& layout = replay.manifest().layout;
  RETURN_IF_ERROR(model.Validate(layout.engram_layer_ids));
  const uint32_t K = replay.map().n_shards;
  const int L = replay.n_layers();
  const double steps = static_cast<double>(std::max<uint64_t>(1, replay.steps()));
  const double steps_per_second = StepsPerSecond(model, replay.options().batch);
  BudgetPlan p;
  p.budget_bytes = budget.budget_bytes;
  p.percent_of_shard =
      100.0 * static_cast<double>(budget.budget_bytes) / static_cast<double>(replay.shard_bytes());
  p.hit_ratio = budget.hit_ratio();
  std::vector<double> utilization;
  for (const ShardReplay& s : budget.shards) {
    ShardPlan sp;
    sp.rows = s.all();
    sp.hit_ratio = s.hit_ratio();
    sp.tail_rows_per_step = static_cast<double>(sp.rows.disk) / steps;
    sp.tail_rows_per_second = sp.tail_rows_per_step * steps_per_second;
    sp.disk_utilization = sp.tail_rows_per_second / model.disk_iops;
    sp.pinned_rows = s.pinned_rows;
    sp.cache_slots = s.cache_slots;
    p.max_tail_rows_per_second = std::max(p.max_tail_rows_per_second, sp.tail_rows_per_second);
    p.max_disk_utilization = std::max(p.max_disk_utilization, sp.disk_utilization);
    utilization.push_back(sp.disk_utilization);
    p.shards.push_back(sp);
  }
  p.layer_exposed_wait_percent.assign(L, 0.0);
  if (p.max_disk_utilization >= 1) {
    // The workers cannot keep the model's rate: the disk paces their steps,
    // each worker's tail read at its share of the disk's rate.
    p.disk_saturated = true;
    p.exposed_wait_percent =
        IdealExposedWaitPercent(replay, budget, model.disk_iops / std::max(1, model.workers),
                                model.disk_latency_us, model.block_us, model.blocks);
    std::fill(p.layer_exposed_wait_percent.begin(), p.layer_exposed_wait_percent.end(),
              p.exposed_wait_percent);
    return p;
  }
  const FetchModel fetch(model, layout.engram_layer_ids, replay.map().row_bytes, utilization);
  std::vector<uint32_t> rows(static_cast<size_t>(L) * K);
  std::vector<double> exposed, layer_sum(L, 0.0);
  double exposed_sum = 0, wall = 0;
  for (uint64_t step = 0; step < replay.steps(); ++step) {
    for (int l = 0; l < L; ++l) {
      for (uint32_t s = 0; s < K; ++s) rows[l * K + s] = replay.step_rows(step, l, s);
    }
    const std::span<const uint32_t> tail(budget.step_tail.data() + step * L * K,
                                         static_cast<size_t>(L) * K);
    const double e = fetch.Step(rows, tail, &exposed);
    for (int l = 0; l < L; ++l) layer_sum[l] += exposed[l];
    exposed_sum += e;
    wall += fetch.step_seconds() + e;
  }
  if (wall > 0) {
    p.exposed_wait_percent = 100.0 * exposed_sum / wall;
    for (int l = 0; l < L; ++l) p.layer_exposed_wait_percent[l] = 100.0 * layer_sum[l] / wall;
  }
  return p;
}

absl::StatusOr<std::vector<BudgetPlan>> PlanBudgets(const TierReplay& replay,
                                                    const std::vector<uint64_t>& budgets,
                                                    const PlanModelOptions& model) {
  RETURN_IF_ERROR(model.Validate(replay.manifest().layout.engram_layer_ids));
  std::vector<BudgetPlan> out;
  for (uint64_t b : budgets) {
    ASSIGN_OR_RETURN(BudgetReplay r, replay.Run(b));
    ASSIGN_OR_RETURN(BudgetPlan p, PlanBudget(replay, r, model));
    out.push_back(std::move(p));
  }
  return out;
}

double IdealExposedWaitPercent(const TierReplay& replay, const BudgetReplay& budget,
                               double disk_reads_per_second, double disk_latency_us,
                               double block_us, int blocks) {
  const std::vector<int64_t>& layer_blocks = replay.manifest().layout.engram_layer_ids;
  const std::vector<int> need_order = NeedOrder(layer_blocks);
  const size_t L = static_cast<size_t>(replay.n_layers()), K = replay.map().n_shards;
  const double block_seconds = block_us * 1e-6;
  const double step_seconds = blocks * block_seconds;
  std::vector<double> arrival, exposed, read(K);
  double exposed_sum = 0, wall = 0;
  for (uint64_t step = 0; step < replay.steps(); ++step) {
    const uint32_t* tail = budget.step_tail.data() + step * L * K;
    arrival.assign(L, 0.0);
    std::fill(read.begin(), read.end(), 0.0);
    for (int l : need_order) {
      for (size_t s = 0; s < K; ++s) {
        const uint32_t t = tail[l * K + s];
        if (t == 0) continue;
        read[s] += t;
        arrival[l] = std::max(arrival[l], disk_latency_us * 1e-6 + read[s] / disk_reads_per_second);
      }
    }
    const double e =
        ExposedFromArrivals(layer_blocks, need_order, block_seconds, arrival, &exposed);
    exposed_sum += e;
    wall += step_seconds + e;
  }
  return wall > 0 ? 100.0 * exposed_sum / wall : 0.0;
}

absl::StatusOr<TailReadFit> FitTailReads(const TierReplay& replay, const BudgetReplay& budget,
                                         const std::vector<std::vector<double>>& fetch_us,
                                         double rtt_us, size_t min_fetches) {
  const size_t L = static_cast<size_t>(replay.n_layers()), K = replay.map().n_shards;
  if (fetch_us.size() != L) {
    return absl::InvalidArgumentError(
        absl::StrCat("fetch times of ", fetch_us.size(), " layers for a table of ", L));
  }
  std::vector<double> x, y;  // tail rows of the busiest shard; fetch less rtt
  for (size_t l = 0; l < L; ++l) {
    if (fetch_us[l].size() > replay.steps() || fetch_us[l].size() != fetch_us[0].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, " has ", fetch_us[l].size(), " fetch times; the replay has ",
                       replay.steps(), " steps and layer 0 ", fetch_us[0].size()));
    }
    for (size_t step = 0; step < fetch_us[l].size(); ++step) {
      const uint32_t* tail = budget.step_tail.data() + (step * L + l) * K;
      const uint32_t t = *std::max_element(tail, tail + K);
      if (t == 0) continue;
      x.push_back(t);
      y.push_back(fetch_us[l][step] - rtt_us);
    }
  }
  if (x.size() < std::max<size_t>(min_fetches, 2)) {
    return absl::InvalidArgumentError(absl::StrCat("only ", x.size(),
                                                   " fetches read the tail; the fit needs ",
                                                   std::max<size_t>(min_fetches, 2)));
  }
  auto median = [](std::vector<double>& v) {
    auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  };
  std::vector<double> slopes;
  slopes.reserve(x.size() * (x.size() - 1) / 2);
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t j = i + 1; j < x.size(); ++j) {
      if (x[i] != x[j]) slopes.push_back((y[j] - y[i]) / (x[j] - x[i]));
    }
  }
  if (slopes.empty()) {
    return absl::InvalidArgumentError("every fetch read as many tail rows: no slope to fit");
  }
  const double slope = median(slopes);  // us per row
  if (!(slope > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the fetches' times do not grow with their tail rows (slope ", slope, " us a row)"));
  }
  std::vector<double> intercepts(x.size());
  for (size_t i = 0; i < x.size(); ++i) intercepts[i] = y[i] - slope * x[i];
  TailReadFit fit;
  fit.latency_us = median(intercepts);
  fit.iops = 1e6 / slope;
  fit.fetches = x.size();
  return fit;
}

}  // namespace engram
