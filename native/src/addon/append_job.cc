// An async append never lets a worker thread read the caller's memory. JavaScript owns that ArrayBuffer
// and may detach it (postMessage or structuredClone with transfer, ArrayBuffer.prototype.transfer), or
// shrink it (a resizable ArrayBuffer) at any moment while the append is in flight; a thread reading it
// then reads freed or unmapped memory. Node-API offers no way to pin a buffer against that, so each piece
// is copied out on the JS thread, where no JavaScript runs during the copy, after checking that the view
// still has the length it had at the call. A view that changed fails the append with INVALID_ARGUMENT
// and nothing is appended. Pieces are small, so the event loop is never held for long whatever the
// append's size, and one piece's memory is all the extra an append needs. Reading each byte once also
// keeps a SharedArrayBuffer that another thread writes meanwhile from giving blocks whose bytes differ
// from their checksums.
#include "append_job.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "args.h"

namespace kvfabric::addon {
namespace {

// What one piece takes from the caller: a fraction of a millisecond to copy on the JS thread, and large
// enough that the hop to the thread pool and back is a small share of the piece's work.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;

struct AppendJob {
  std::shared_ptr<PagedAllocator> pool;  // declared before lease: the lease dies first
  AppendLease lease;
  Napi::Reference<Napi::Uint8Array> source;
  size_t sourceBytes = 0;  // the view's length at the call
  uint64_t bytesPerToken = 0;
  uint64_t tokensPerPiece = 0;
  uint64_t takenTokens = 0;
  std::unique_ptr<uint8_t[]> piece;
  uint64_t pieceTokens = 0;
  Napi::Promise::Deferred deferred;

  explicit AppendJob(Napi::Promise::Deferred settles) : deferred(settles) {}
};

void takeNextPiece(Napi::Env env, const std::shared_ptr<AppendJob>& job);

// Copies one piece into the blocks; the last piece also commits the append.
class PieceWorker final : public Napi::AsyncWorker {
 public:
  PieceWorker(Napi::Env env, std::shared_ptr<AppendJob> job)
      : Napi::AsyncWorker(env, "kvfabric.append"),
        job_(std::move(job)),
        last_(job_->lease.tokensLeft() == job_->pieceTokens) {}

  void Execute() override {
    job_->lease.copyNext(job_->piece.get(), job_->pieceTokens);
    if (last_) status_ = job_->lease.commit();
  }

  void OnOK() override {
    if (!status_.isOk()) {
      job_->deferred.Reject(fabricError(Env(), status_).Value());
    } else if (last_) {
      job_->deferred.Resolve(Env().Undefined());
    } else {
      takeNextPiece(Env(), job_);
    }
  }

  void OnError(const Napi::Error& error) override {
    job_->lease = AppendLease();  // undone: nothing is appended
    job_->deferred.Reject(error.Value());
  }

 private:
  std::shared_ptr<AppendJob> job_;  // the last holder frees the job, on the JS thread
  const bool last_;
  Status status_;
};

void fail(const std::shared_ptr<AppendJob>& job, Napi::Env env, const Status& status) {
  job->lease = AppendLease();  // undone: nothing is appended
  job->deferred.Reject(fabricError(env, status).Value());
}

void takeNextPiece(Napi::Env env, const std::shared_ptr<AppendJob>& job) {
  Napi::HandleScope scope(env);
  // Value() asks for the view's length and address afresh: they are zero, or shorter, once the buffer
  // was detached or shrunk.
  Napi::Uint8Array view = job->source.Value();
  if (view.ByteLength() != job->sourceBytes || view.Data() == nullptr) {
    fail(job, env,
         Status(Code::kInvalidArgument, "kv was detached, transferred or resized while its append was in flight (" +
                                            std::to_string(job->sourceBytes) + " bytes at the call, " +
                                            std::to_string(view.ByteLength()) + " now); nothing was appended"));
    return;
  }
  const uint64_t tokens = std::min(job->tokensPerPiece, job->lease.tokensLeft());
  std::memcpy(job->piece.get(), view.Data() + job->takenTokens * job->bytesPerToken, tokens * job->bytesPerToken);
  job->takenTokens += tokens;
  job->pieceTokens = tokens;
  (new PieceWorker(env, job))->Queue();
}

}  // namespace

void startAppend(Napi::Env env, Napi::Promise::Deferred deferred, std::shared_ptr<PagedAllocator> pool,
                 AppendLease lease, Napi::Uint8Array source) {
  if (lease.tokens() == 0) {  // an empty append: nothing to copy or commit
    deferred.Resolve(env.Undefined());
    return;
  }
  std::shared_ptr<AppendJob> job;
  try {
    job = std::make_shared<AppendJob>(deferred);
  } catch (const std::bad_alloc&) {
    deferred.Reject(fabricError(env, Status(Code::kOutOfMemory, "cannot start an append")).Value());
    return;  // the lease, destroyed here, undoes the reservation
  }
  job->bytesPerToken = pool->layout().bytesPerToken;
  job->pool = std::move(pool);
  job->lease = std::move(lease);
  job->source = Napi::Persistent(source);
  job->sourceBytes = source.ByteLength();
  job->tokensPerPiece = std::max<uint64_t>(1, kPieceBytes / job->bytesPerToken);
  const uint64_t pieceBytes = std::min(job->tokensPerPiece, job->lease.tokens()) * job->bytesPerToken;
  job->piece.reset(new (std::nothrow) uint8_t[pieceBytes]);
  if (!job->piece) {
    fail(job, env,
         Status(Code::kOutOfMemory, "cannot hold a piece of " + std::to_string(pieceBytes) + " bytes of an append"));
    return;
  }
  takeNextPiece(env, job);
}

}  // namespace kvfabric::addon
