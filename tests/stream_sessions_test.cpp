// Resumable streams' sessions in reclaim's server library: what a session
// keeps of a long stream, and its place on the ledger from its opening to
// its end (tests/serve_compat_test.cpp runs them over HTTP).
#include <gtest/gtest.h>

#include "core/ledger.h"
#include "core/scope.h"
#include "server/stream_sessions.h"

using namespace reclaim;
using namespace reclaim::server;

namespace {

// The bytes of `ledger`'s buffers, and how many there are.
LedgerTotals buffers(const Ledger& ledger) {
  const auto kinds = ledger.by_kind();
  const auto it = kinds.find(Kind::buffer);
  return it == kinds.end() ? LedgerTotals{} : it->second;
}

}  // namespace

TEST(StreamSessions, ALongStreamKeepsItsLastBytesWithinTheBoundAndTheLedgerShowsThem) {
  Ledger ledger;
  Scope scope("http", {}, &ledger);
  {
    StreamSessions sessions(scope);
    std::shared_ptr<StreamSession> s = sessions.open("conv");
    ASSERT_TRUE(s);
    EXPECT_EQ(buffers(ledger).count, 1u);

    // 10 MiB in chunks of 1000 bytes, each chunk its own byte: what is
    // kept is the stream's tail, whole.
    const size_t chunk = 1000, chunks = 10 * 1024 + 7;
    std::string piece(chunk, ' ');
    for (size_t i = 0; i < chunks; ++i) {
      piece.assign(chunk, static_cast<char>('a' + i % 26));
      s->append(piece);
      ASSERT_LE(s->kept(), StreamSessions::kMaxBytes);
      ASSERT_LE(buffers(ledger).bytes, StreamSessions::kMaxBytes) << "the heap grew past the bound at chunk " << i;
      ASSERT_GE(buffers(ledger).bytes, s->kept());
    }
    EXPECT_EQ(s->total(), chunk * chunks);
    EXPECT_GE(s->kept(), StreamSessions::kKeptBytes);

    size_t offset = s->total() - s->kept();
    std::string out;
    EXPECT_EQ(s->read(offset, out, std::chrono::milliseconds(0)), StreamSession::Read::more);
    ASSERT_EQ(out.size(), s->kept());
    for (size_t at = 0; at < out.size(); at += 997) {
      const size_t byte = s->total() - s->kept() + at;
      ASSERT_EQ(out[at], static_cast<char>('a' + byte / chunk % 26)) << "byte " << byte;
    }
    size_t behind = s->total() - s->kept() - 1;
    EXPECT_EQ(s->read(behind, out, std::chrono::milliseconds(0)), StreamSession::Read::lost);

    // One chunk larger than what is kept: its tail is.
    const std::string huge(StreamSessions::kMaxBytes + 5, 'z');
    s->append(huge);
    EXPECT_EQ(s->kept(), StreamSessions::kKeptBytes);
    EXPECT_EQ(s->total(), chunk * chunks + huge.size());
    EXPECT_LE(buffers(ledger).bytes, StreamSessions::kMaxBytes);

    // Forgotten while a reader still holds it: on the ledger until the
    // reader lets it go, as its bytes are.
    sessions.forget("conv");
    EXPECT_EQ(buffers(ledger).count, 1u);
    s.reset();
    EXPECT_EQ(buffers(ledger).count, 0u);
  }
  scope.close();
  EXPECT_EQ(ledger.totals().count, 0u);
}

TEST(StreamSessions, EachSessionIsAnEntryUntilItsEnd) {
  Ledger ledger;
  Scope scope("http", {}, &ledger);
  StreamSessions sessions(scope);
  ASSERT_TRUE(sessions.open("a"));
  ASSERT_TRUE(sessions.open("b"));
  sessions.find("a")->append("data: one\n\n");
  EXPECT_EQ(buffers(ledger).count, 2u);
  EXPECT_GE(buffers(ledger).bytes, sessions.bytes());
  // A new session of the same conversation takes the old one's place.
  ASSERT_TRUE(sessions.open("a"));
  EXPECT_EQ(buffers(ledger).count, 2u);
  sessions.forget("a");
  sessions.forget("b");
  EXPECT_EQ(buffers(ledger).count, 0u);
}
