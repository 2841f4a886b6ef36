// The seed corpus generator's parts (engram-fuzz-corpus, fuzz/CMakeLists.txt):
// each writes the seeds of some fuzz targets into <corpus>/<target>/.
#ifndef ENGRAM_FUZZ_MAKE_CORPUS_H_
#define ENGRAM_FUZZ_MAKE_CORPUS_H_

#include <string>
#include <string_view>

namespace engram::fuzz {

// Writes `bytes` to <corpus>/<target>/<name>, creating the folder; aborts
// with a message on an I/O error (a generator has no one to return it to).
void WriteSeed(const std::string& corpus, const std::string& target, const std::string& name,
               std::string_view bytes);

// wire_request_fuzz, wire_response_fuzz, stream_frame_fuzz (make_corpus_wire.cc).
void WriteWireSeeds(const std::string& corpus);

// checkpoint_config_fuzz, safetensors_index_fuzz (make_corpus_checkpoint.cc).
void WriteCheckpointSeeds(const std::string& corpus);

}  // namespace engram::fuzz

#endif  // ENGRAM_FUZZ_MAKE_CORPUS_H_
