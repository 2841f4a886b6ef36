// UringFileSystem: a RocksDB FileSystem whose random-access files answer
// MultiRead through io_uring, so one MultiGet puts all of its data-block
// reads in the device's queue at once instead of one pread after another.
//
// RocksDB's MultiGet reads the data blocks of a batch of keys with one
// FSRandomAccessFile::MultiRead per table file. Debian's RocksDB is built
// without io_uring, and its MultiRead issues the reads one at a time; a
// reader thread then has one read in flight, and a layer's tail reads wait
// for as many threads to get a core as it has rows. With this file system
// one thread submits a whole chunk's reads in one system call.
//
// Everything else (Read, opening, writing, directories) is the base file
// system's. A MultiRead falls back to the base file's when this thread
// cannot set up a ring (a kernel or seccomp profile without io_uring; see
// UringAvailable), and a request the ring reads short is read again with
// the base file's Read, so results are the base file system's either way.
//
// Thread-safe: each thread that calls MultiRead gets its own ring, made on
// first use and kept for the thread's life.
#ifndef ENGRAM_SHARD_URING_FILE_SYSTEM_H_
#define ENGRAM_SHARD_URING_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>

#include "rocksdb/file_system.h"

namespace engram {

// Reads served through rings, for stats: requests and MultiRead calls.
struct UringReadCounts {
  uint64_t reads = 0;
  uint64_t calls = 0;
};

// The file system above, over `base`. The counts are shared by every file
// it opens.
std::shared_ptr<rocksdb::FileSystem> NewUringFileSystem(std::shared_ptr<rocksdb::FileSystem> base);

// What the file system `fs` (made by NewUringFileSystem) has read through
// rings since it was made.
UringReadCounts UringCounts(const rocksdb::FileSystem& fs);

// Whether this process can set up an io_uring (checked once, on a ring of
// its own).
bool UringAvailable();

}  // namespace engram

#endif  // ENGRAM_SHARD_URING_FILE_SYSTEM_H_
