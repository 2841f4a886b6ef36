#include "bench/shard/bench_shard_stream.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/net/socket_io.h"
#include "common/util/status_macros.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/stream_wire.h"

namespace engram::bench {

StreamLookupClient::~StreamLookupClient() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status StreamLookupClient::Open() {
  RETURN_IF_ERROR(served_.Learn(*channel_));
  if (stream_port_ <= 0) return absl::FailedPreconditionError("the shard offers no row stream");
  ASSIGN_OR_RETURN(fd_, ConnectTcp("127.0.0.1", stream_port_, absl::Seconds(5)));
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(stream::kVersion, hello);
  iovec iov = {hello, sizeof(hello)};
  if (!WriteFull(fd_, &iov, 1)) return ErrnoStatus("row stream hello");
  if (!ReadFull(fd_, hello, sizeof(hello))) return ErrnoStatus("row stream hello reply");
  return stream::DecodeHello(hello).status();
}

absl::StatusOr<RowPieces> StreamLookupClient::Lookup(std::span<const wire::LayerRowIds> layers,
                                                     size_t rows_bytes) {
  if (fd_ < 0) RETURN_IF_ERROR(Open());
  const grpc::Slice request = wire::EncodeLookupRequest(served_.table, served_.version, layers);
  stream::FrameHeader header;
  header.id = next_id_++;
  header.word = stream::kLookup;
  header.payload_bytes = request.size();
  uint8_t head[stream::kHeaderBytes];
  stream::EncodeHeader(header, head);
  iovec iov[2] = {{head, sizeof(head)}, {const_cast<uint8_t*>(request.begin()), request.size()}};
  if (!WriteFull(fd_, iov, 2)) return ErrnoStatus("row stream: send");
  if (!ReadFull(fd_, head, sizeof(head), /*quick_ack=*/true)) {
    return ErrnoStatus("row stream: response header");
  }
  const stream::FrameHeader reply = stream::DecodeHeader(head);
  const size_t expected = wire::LookupResponseSize(served_.version, rows_bytes);
  if (reply.id != header.id || (reply.word == 0 && reply.payload_bytes != expected) ||
      reply.payload_bytes > expected + stream::kMaxErrorBytes) {
    return absl::InternalError(absl::StrCat("row stream: response ", reply.id, " of ",
                                            reply.payload_bytes, " bytes to request ", header.id,
                                            " (expected ", expected, ")"));
  }
  payload_.resize(reply.payload_bytes);
  if (!ReadFull(fd_, payload_.data(), payload_.size(), /*quick_ack=*/true)) {
    return ErrnoStatus("row stream: response");
  }
  if (reply.word != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply.word),
                        std::string(payload_.begin(), payload_.end()));
  }
  grpc::Slice slice(payload_.data(), payload_.size(), grpc::Slice::STATIC_SLICE);
  const grpc::ByteBuffer response(&slice, 1);
  RETURN_IF_ERROR(wire::LocateLookupResponseRows(response, rows_bytes, &rows_).status());
  return RowPieces(rows_.spans);
}

}  // namespace engram::bench
