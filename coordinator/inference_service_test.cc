#include "coordinator/inference_service.h"

#include "gtest/gtest.h"

namespace cascade {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// inference_wire.proto mirrors inference.proto field for field, strings as bytes.
void ExpectTwins(const Descriptor* pub, const Descriptor* wire) {
  ASSERT_EQ(pub->field_count(), wire->field_count()) << pub->full_name();
  for (int i = 0; i < pub->field_count(); ++i) {
    const FieldDescriptor* p = pub->field(i);
    const FieldDescriptor* w = wire->FindFieldByNumber(p->number());
    ASSERT_NE(w, nullptr) << pub->full_name() << "." << p->name();
    EXPECT_EQ(w->name(), p->name());
    EXPECT_EQ(w->is_repeated(), p->is_repeated()) << p->name();
    if (p->type() == FieldDescriptor::TYPE_STRING) {
      EXPECT_EQ(w->type(), FieldDescriptor::TYPE_BYTES) << p->name();
    } else {
      EXPECT_EQ(w->type(), p->type()) << p->name();
      if (p->type() == FieldDescriptor::TYPE_MESSAGE) {
        EXPECT_EQ(w->message_type(), p->message_type()) << p->name();
      }
    }
  }
}

TEST(InferenceWire, MirrorsThePublicRequests) {
  ExpectTwins(v1::GenerateRequest::descriptor(), v1::wire::GenerateRequest::descriptor());
  ExpectTwins(v1::TokenizeRequest::descriptor(), v1::wire::TokenizeRequest::descriptor());
  ExpectTwins(v1::DetokenizeRequest::descriptor(), v1::wire::DetokenizeRequest::descriptor());
  ExpectTwins(v1::GetModelInfoRequest::descriptor(), v1::wire::GetModelInfoRequest::descriptor());
}

TEST(InferenceWire, FromWireChecksUtf8AndNamesTheField) {
  v1::wire::GenerateRequest w;
  w.set_prompt("Once upon a time");
  w.add_stop("\n");
  w.add_stop(std::string("ok\xc3", 3));  // a truncated two-byte sequence
  w.set_max_tokens(7);
  v1::GenerateRequest out;
  absl::Status st = FromWire(w, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "'stop[1]' is not valid UTF-8 text");
  w.set_stop(1, "ok\xc3\xa9");
  ASSERT_TRUE(FromWire(w, &out).ok());
  EXPECT_EQ(out.prompt(), "Once upon a time");
  EXPECT_EQ(out.stop(1), "ok\xc3\xa9");
  EXPECT_EQ(out.max_tokens(), 7);
}

}  // namespace
}  // namespace cascade
