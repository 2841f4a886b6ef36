#include "shard/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace engram {
namespace {

// One registered range. The handler reads these with no lock: a slot is
// claimed (state 1), filled, then published (state 2); unregistering goes
// back through 1 to 0 (free).
struct Slot {
  std::atomic<int> state{0};
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<uint64_t> zeroed{0};
  std::atomic<uint64_t> first_fault{0};  // lowest faulting offset in the range
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr int kFree = 0, kBusy = 1, kActive = 2;

Slot g_slots[MappingGuard::kMaxRanges];
std::atomic<size_t> g_used{0};  // slots [0, g_used) may be active
uintptr_t g_page_size = 4096;
struct sigaction g_previous;  // the SIGBUS action before ours
std::once_flag g_install_once;

// Replaces the page at `addr` in an active range with zeros. False when
// the address is in no range (or the page cannot be replaced).
bool ZeroFaultingPage(uintptr_t addr) {
  const size_t n = g_used.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    Slot& s = g_slots[i];
    if (s.state.load(std::memory_order_acquire) != kActive) continue;
    const uintptr_t start = s.start.load(std::memory_order_relaxed);
    if (addr < start || addr >= s.end.load(std::memory_order_relaxed)) continue;
    const uintptr_t page = addr & ~(g_page_size - 1);
    void* p = mmap(reinterpret_cast<void*>(page), g_page_size, PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return false;
    s.zeroed.fetch_add(1, std::memory_order_relaxed);
    const uint64_t off = page > start ? page - start : 0;
    uint64_t cur = s.first_fault.load(std::memory_order_relaxed);
    while (off < cur && !s.first_fault.compare_exchange_weak(cur, off, std::memory_order_relaxed)) {
    }
    return true;
  }
  return false;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  // An alignment fault is a bug, never a lost page.
  if (info->si_code != BUS_ADRALN && ZeroFaultingPage(reinterpret_cast<uintptr_t>(info->si_addr))) {
    return;  // the access is retried and reads zeros
  }
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: restore it; a fault then recurs when the access is
  // retried (a core at the faulting instruction), a sent signal is re-sent.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  if (info->si_code <= 0) raise(SIGBUS);
}

void Install() {
  g_page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  struct sigaction sa {};
  sa.sa_sigaction = &OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappingGuard>> MappingGuard::Register(const void* base, size_t size,
                                                                     std::string path,
                                                                     uint64_t file_offset) {
  std::call_once(g_install_once, Install);
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  for (size_t i = 0; i < kMaxRanges; ++i) {
    Slot& s = g_slots[i];
    int expected = kFree;
    if (!s.state.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) continue;
    s.start.store(start, std::memory_order_relaxed);
    s.end.store(start + size, std::memory_order_relaxed);
    s.zeroed.store(0, std::memory_order_relaxed);
    s.first_fault.store(~uint64_t{0}, std::memory_order_relaxed);
    size_t used = g_used.load(std::memory_order_relaxed);
    while (used < i + 1 && !g_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
    }
    s.state.store(kActive, std::memory_order_release);
    return std::unique_ptr<MappingGuard>(new MappingGuard(i, std::move(path), file_offset));
  }
  return absl::ResourceExhaustedError(absl::StrCat("more than ", kMaxRanges,
                                                   " file mappings to guard against SIGBUS (", path,
                                                   " would be one more)"));
}

MappingGuard::~MappingGuard() {
  Slot& s = g_slots[slot_];
  s.state.store(kBusy, std::memory_order_release);
  s.start.store(0, std::memory_order_relaxed);
  s.end.store(0, std::memory_order_relaxed);
  s.state.store(kFree, std::memory_order_release);
}

uint64_t MappingGuard::zeroed_pages() const {
  return g_slots[slot_].zeroed.load(std::memory_order_relaxed);
}

std::string MappingGuard::Describe() const {
  const uint64_t n = zeroed_pages();
  if (n == 0) return "";
  return absl::StrCat(n, n == 1 ? " page" : " pages", " of ", path_, " from byte ",
                      file_offset_ + g_slots[slot_].first_fault.load(std::memory_order_relaxed),
                      " on could not be read (the file was truncated or the device failed) and ",
                      n == 1 ? "reads" : "read", " as zeros");
}

std::vector<FileMapping> FileMappingsIn(const std::string& dir) {
  std::vector<FileMapping> out;
  std::error_code ec;
  const std::string root = std::filesystem::canonical(dir, ec).string();
  if (ec) return out;
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string range, perms, offset, dev, inode, path;
    f >> range >> perms >> offset >> dev >> inode;
    std::getline(f >> std::ws, path);
    if (path.size() <= root.size() || path.compare(0, root.size(), root) != 0 ||
        path[root.size()] != '/') {
      continue;
    }
    FileMapping e;
    uint64_t start = 0, end = 0;
    const size_t dash = range.find('-');
    if (dash == std::string::npos ||
        !absl::SimpleHexAtoi(absl::string_view(range).substr(0, dash), &start) ||
        !absl::SimpleHexAtoi(absl::string_view(range).substr(dash + 1), &end) ||
        !absl::SimpleHexAtoi(offset, &e.offset)) {
      continue;  // not a line of the documented form: not used
    }
    e.start = static_cast<uintptr_t>(start);
    e.end = static_cast<uintptr_t>(end);
    e.path = std::move(path);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(),
            [](const FileMapping& a, const FileMapping& b) { return a.start < b.start; });
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<MappingGuard>>> GuardNewMappingsIn(
    const std::string& dir, const std::vector<FileMapping>& before) {
  std::vector<std::unique_ptr<MappingGuard>> guards;
  for (const FileMapping& m : FileMappingsIn(dir)) {
    const bool old = std::any_of(before.begin(), before.end(), [&](const FileMapping& b) {
      return b.start == m.start && b.end == m.end && b.path == m.path;
    });
    if (old) continue;
    absl::StatusOr<std::unique_ptr<MappingGuard>> g = MappingGuard::Register(
        reinterpret_cast<const void*>(m.start), m.end - m.start, m.path, m.offset);
    if (!g.ok()) return g.status();
    guards.push_back(*std::move(g));
  }
  return guards;
}

std::string DescribeFaults(const std::vector<std::unique_ptr<MappingGuard>>& guards) {
  std::string out;
  for (const std::unique_ptr<MappingGuard>& g : guards) {
    const std::string d = g->Describe();
    if (!d.empty()) absl::StrAppend(&out, out.empty() ? "" : "; ", d);
  }
  return out;
}

}  // namespace engram
