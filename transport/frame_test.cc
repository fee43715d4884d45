#include "transport/frame.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

FrameExpectations Middle() {
  FrameExpectations e;
  e.plan_id = 7;
  e.stage = 1;
  e.first_stage = false;
  e.dim = 4;
  e.vocab_size = 100;
  e.max_batch_tokens = 16;
  e.context_length = 64;
  return e;
}

StageFrame Sample() {
  StageFrame f;
  f.plan_id = 7;
  f.batch_id = 3;
  f.stage = 1;
  f.slots = {{5, 11, 0, false}, {6, 11, 1, true}, {9, 12, 4, true}};
  f.hidden.resize(3 * 4);
  for (size_t i = 0; i < f.hidden.size(); ++i) f.hidden[i] = 0.5f * static_cast<float>(i);
  SequenceSampling a;
  a.seq = 11;
  a.params.temperature = 0.7f;
  a.params.seed = 99;
  a.params.repetition_penalty = 1.2f;
  a.params.penalty_last_n = 32;
  a.params.logit_bias = {{3, -100.0f}, {42, 2.5f}};
  a.logprobs = true;
  a.top_logprobs = 4;
  SequenceSampling b;
  b.seq = 12;
  b.params = SamplingParams::Greedy();
  f.admit = {a, b};
  f.release = {4, 8};
  f.evict = {{1, 2}};
  f.attach = {{12, {{3, 4}, {5, 6}}, {13, 14}, 5}};
  f.publish = {{11, 0, {7, 8}}, {12, 2, {9, 10}}};
  return f;
}

TEST(Frame, RoundTrip) {
  v1::ActivationFrame wire;
  EncodeFrame(Sample(), "", &wire);
  // Through bytes, as on the network.
  std::string bytes = wire.SerializeAsString();
  v1::ActivationFrame parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  auto f = DecodeFrame(parsed, Middle());
  ASSERT_TRUE(f.ok()) << f.status();
  const StageFrame want = Sample();
  EXPECT_EQ(f->batch_id, 3u);
  ASSERT_EQ(f->slots.size(), 3u);
  EXPECT_EQ(f->slots[2].seq, 12);
  EXPECT_EQ(f->slots[2].pos, 4);
  EXPECT_TRUE(f->slots[1].want_logits);
  EXPECT_EQ(f->hidden, want.hidden);
  ASSERT_EQ(f->admit.size(), 2u);
  EXPECT_EQ(f->admit[0].seq, 11);
  EXPECT_EQ(f->admit[0].params.seed, 99u);
  EXPECT_FLOAT_EQ(f->admit[0].params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(f->admit[0].params.repetition_penalty, 1.2f);
  EXPECT_EQ(f->admit[0].params.penalty_last_n, 32);
  EXPECT_EQ(f->admit[0].params.logit_bias, want.admit[0].params.logit_bias);
  EXPECT_TRUE(f->admit[0].logprobs);
  EXPECT_EQ(f->admit[0].top_logprobs, 4);
  EXPECT_TRUE(f->admit[1].params.greedy());
  // A frame's token ids reach every stage (the last stage's penalty window).
  EXPECT_EQ(f->slots[1].token, 6);
  EXPECT_EQ(f->release, (std::vector<SeqId>{4, 8}));
  // The prefix cache's instructions.
  EXPECT_EQ(f->evict, (std::vector<BlockName>{{1, 2}}));
  ASSERT_EQ(f->attach.size(), 1u);
  EXPECT_EQ(f->attach[0].seq, 12);
  EXPECT_EQ(f->attach[0].blocks, (std::vector<BlockName>{{3, 4}, {5, 6}}));
  EXPECT_EQ(f->attach[0].partial, (BlockName{13, 14}));
  EXPECT_EQ(f->attach[0].partial_rows, 5);
  ASSERT_EQ(f->publish.size(), 2u);
  EXPECT_EQ(f->publish[1].seq, 12);
  EXPECT_EQ(f->publish[1].block, 2);
  EXPECT_EQ(f->publish[1].name, (BlockName{9, 10}));
}

// Applies `mutate` to a valid wire frame and expects DecodeFrame to name `problem`.
void ExpectRejected(const std::function<void(v1::ActivationFrame*)>& mutate,
                    const std::string& problem) {
  v1::ActivationFrame wire;
  EncodeFrame(Sample(), "", &wire);
  mutate(&wire);
  auto f = DecodeFrame(wire, Middle());
  ASSERT_FALSE(f.ok()) << problem;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(problem));
}

TEST(Frame, ASequenceVerifyingDraftsSamplesAtEachOfItsLastSlots) {
  StageFrame f = Sample();
  f.slots[0].want_logits = true;  // sequence 11: positions 0 and 1 both sampled
  v1::ActivationFrame wire;
  EncodeFrame(f, "", &wire);
  auto d = DecodeFrame(wire, Middle());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->slots[0].want_logits);
  EXPECT_TRUE(d->slots[1].want_logits);
}

TEST(Frame, RejectsEveryKindOfBadField) {
  ExpectRejected([](auto* w) { w->set_version(1); }, "1 is not the supported version 2");
  ExpectRejected([](auto* w) { w->set_plan_id(8); }, "plan_id");
  ExpectRejected([](auto* w) { w->set_stage(2); }, "frame is for stage 2, this is stage 1");
  ExpectRejected([](auto* w) { w->set_dtype(v1::DTYPE_UNSPECIFIED); }, "dtype");
  ExpectRejected([](auto* w) { w->set_shape(1, 5); }, "shape: [3, 5] is not [3, 4]");
  ExpectRejected([](auto* w) { w->mutable_payload()->resize(10); }, "payload: 10 bytes");
  ExpectRejected([](auto* w) { w->add_positions(3); }, "per-token fields");
  ExpectRejected([](auto* w) { w->set_positions(0, -1); }, "positions[0]");
  ExpectRejected([](auto* w) { w->set_positions(1, 64); }, "outside the context");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->set_seq_id(99); },
                 "admit[seq 99]: the sequence has no token in this frame");
  ExpectRejected([](auto* w) { w->mutable_admit(1)->set_seq_id(11); }, "admit[seq 11]: duplicate");
  ExpectRejected([](auto* w) { w->mutable_attach(0)->set_seq_id(99); },
                 "attach[seq 99]: the sequence has no token in this frame");
  ExpectRejected([](auto* w) { *w->add_attach() = w->attach(0); }, "attach[seq 12]: duplicate");
  ExpectRejected(
      [](auto* w) {
        w->mutable_attach(0)->clear_blocks();
        w->mutable_attach(0)->clear_partial();
        w->mutable_attach(0)->set_partial_rows(0);
      },
      "attach[seq 12]: 0 blocks");
  ExpectRejected([](auto* w) { w->mutable_attach(0)->clear_partial(); },
                 "attach[seq 12]: 5 rows of no partial block");
  ExpectRejected([](auto* w) { w->mutable_attach(0)->set_partial_rows(-1); },
                 "attach[seq 12]: -1 rows of a partial block");
  ExpectRejected([](auto* w) { w->mutable_publish(0)->set_seq_id(99); },
                 "publish[seq 99]: the sequence has no token in this frame");
  ExpectRejected([](auto* w) { w->mutable_publish(0)->set_block(-1); }, "block -1 is outside");
  ExpectRejected(
      [](auto* w) {
        for (int i = 0; i < 3; ++i) *w->add_publish() = w->publish(0);
      },
      "publish: 5 blocks for 3 tokens");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->set_top_p(3.0f); }, "top_p");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->set_penalty_last_n(5000); }, "penalty_last_n");
  ExpectRejected([](auto* w) { w->set_tokens(0, 100); }, "tokens[0]: 100 is outside the vocabulary");
  ExpectRejected(
      [](auto* w) {
        for (int i = 0; i < 20; ++i) {
          w->add_seq_ids(1);
          w->add_positions(0);
          w->add_tokens(0);
          w->add_want_logits(false);
        }
      },
      "exceed the batch limit");
  ExpectRejected(
      [](auto* w) {
        w->set_want_logits(0, true);
        w->set_want_logits(1, false);
      },
      "sequence 11 samples at a position before 1 but not at 1");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->set_top_logprobs(21); }, "top_logprobs 21");
  ExpectRejected(
      [](auto* w) {
        v1::TokenBias* b = w->mutable_admit(0)->add_logit_bias();
        b->set_token(100);
        b->set_bias(1);
      },
      "logit_bias token 100 is outside the vocabulary");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->mutable_logit_bias(1)->set_bias(200); },
                 "outside [-100, 100]");
  ExpectRejected([](auto* w) { w->mutable_admit(0)->mutable_logit_bias(1)->set_token(3); },
                 "not sorted and distinct");
}

TEST(Frame, ResultsCarryTheTopTokensAndAreChecked) {
  StepResult r;
  r.plan_id = 7;
  r.batch_id = 2;
  r.tokens.push_back({11, 5, -0.5f, 3, {{5, -0.5f}, {9, -1.5f}}});
  v1::StepResult wire;
  EncodeResult(r, "k", &wire);
  auto back = DecodeResult(wire, "k", 7, 100);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tokens.size(), 1u);
  EXPECT_EQ(back->tokens[0].top, r.tokens[0].top);
  v1::StepResult lying = wire;
  lying.mutable_tokens(0)->add_top_tokens(1);  // a token without its logprob
  EXPECT_FALSE(DecodeResult(lying, "k", 7, 100).ok());
  lying = wire;
  lying.mutable_tokens(0)->set_top_tokens(1, 100);
  EXPECT_FALSE(DecodeResult(lying, "k", 7, 100).ok());
}

TEST(Frame, FirstStageTakesTokensOnly) {
  FrameExpectations first = Middle();
  first.stage = 0;
  first.first_stage = true;
  StageFrame f = Sample();
  f.stage = 0;
  f.hidden.clear();
  v1::ActivationFrame wire;
  EncodeFrame(f, "", &wire);
  EXPECT_TRUE(DecodeFrame(wire, first).ok());
  wire.set_tokens(1, 100);
  EXPECT_THAT(std::string(DecodeFrame(wire, first).status().message()),
              HasSubstr("tokens[1]: 100 is outside the vocabulary"));
  f.hidden.resize(12);
  EncodeFrame(f, "", &wire);
  EXPECT_THAT(std::string(DecodeFrame(wire, first).status().message()),
              HasSubstr("takes token ids"));
}

TEST(Frame, ReleaseOnlyAndErrorFramesPassThrough) {
  StageFrame f;
  f.plan_id = 7;
  f.stage = 1;
  f.release = {1, 2, 3};
  f.evict = {{4, 5}};
  v1::ActivationFrame wire;
  EncodeFrame(f, "", &wire);
  auto d = DecodeFrame(wire, Middle());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->slots.empty());
  EXPECT_EQ(d->release.size(), 3u);
  EXPECT_EQ(d->evict.size(), 1u);
  // Blocks are attached and published only with tokens.
  v1::ActivationFrame attach = wire;
  attach.add_attach()->set_seq_id(1);
  EXPECT_THAT(std::string(DecodeFrame(attach, Middle()).status().message()),
              HasSubstr("a frame without tokens caches blocks"));
  f.error = "stage 0: KV cache full";
  EncodeFrame(f, "", &wire);
  d = DecodeFrame(wire, Middle());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->error, "stage 0: KV cache full");
}

}  // namespace
}  // namespace cascade
