#include "engine/text_stream.h"

#include <gtest/gtest.h>

using namespace reclaim;

namespace {

// Feeds `pieces` and returns what was emitted, piece by piece, "|"-joined.
std::string feed(TextStream& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += s.push(p) + "|";
  return out + s.finish();
}

}  // namespace

TEST(TextStream, AMultiByteCharacterSplitAcrossTokensIsEmittedWhole) {
  TextStream s;
  // "€" is E2 82 AC; "😀" is F0 9F 98 80.
  EXPECT_EQ(feed(s, {"a\xE2", "\x82", "\xAC" "b", "\xF0\x9F", "\x98\x80"}), "a||\xE2\x82\xAC" "b||\xF0\x9F\x98\x80|");
}

TEST(TextStream, BrokenBytesBecomeReplacementCharacters) {
  EXPECT_EQ(valid_utf8("a\x80" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(valid_utf8("\xE2\x82" "x"), "\xEF\xBF\xBD" "x");  // cut short
  EXPECT_EQ(valid_utf8("h\xC3\xA9llo"), "h\xC3\xA9llo");
  TextStream s;
  // An unfinished character at the very end is not dropped silently.
  EXPECT_EQ(feed(s, {"ok", "\xE2\x82"}), "ok||\xEF\xBF\xBD");
  TextStream t;
  // A lead byte followed by a non-continuation: the lead is broken, the rest is kept.
  EXPECT_EQ(feed(t, {"\xE2", "A"}), "|\xEF\xBF\xBD" "A|");
}

TEST(TextStream, UnfinishedTail) {
  EXPECT_EQ(unfinished_utf8_tail("ab"), 0u);
  EXPECT_EQ(unfinished_utf8_tail("a\xE2"), 1u);
  EXPECT_EQ(unfinished_utf8_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(unfinished_utf8_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(unfinished_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(unfinished_utf8_tail("\xE0\x80"), 0u);  // can never be valid
}

TEST(TextStream, StopStringsAcrossPiecesAreHeldThenDropped) {
  TextStream s({"</end>"});
  EXPECT_EQ(s.push("hello </"), "hello ");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("en"), "");
  EXPECT_EQ(s.push("d> and more"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.matched_stop(), "</end>");
  EXPECT_EQ(s.push("later"), "");
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, AHeldPrefixThatDoesNotCompleteIsReleased) {
  TextStream s({"STOP"});
  EXPECT_EQ(s.push("a ST"), "a ");
  EXPECT_EQ(s.push("OX b"), "STOX b");
  EXPECT_EQ(s.push("ST"), "");
  EXPECT_EQ(s.finish(), "ST");
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, TheEarliestOfSeveralStopsWins) {
  TextStream s({"b c", "a"});
  EXPECT_EQ(s.push("xx b c a"), "xx ");
  EXPECT_EQ(s.matched_stop(), "b c");
  TextStream t({"", "z"});  // an empty stop string is ignored, not a match at 0
  EXPECT_EQ(t.push("abc"), "abc");
}
