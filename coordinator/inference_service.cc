#include "coordinator/inference_service.h"

#include "absl/strings/str_cat.h"
#include "serving/generate_spec.h"
#include "serving/proto_request.h"
#include "transport/grpc_util.h"
#include "util/secret.h"
#include "util/utf8.h"
#include "grpcpp/impl/codegen/method_handler.h"
#include "grpcpp/impl/codegen/rpc_service_method.h"

namespace cascade {
namespace {

void FillTop(const std::vector<TokenLogprob>& top, v1::TopLogprobs* out) {
  for (const TokenLogprob& t : top) {
    out->add_token_ids(t.token);
    out->add_logprobs(t.logprob);
  }
}

void FillUsage(const StreamUsage& u, v1::Usage* out) {
  out->set_prompt_tokens(u.prompt_tokens);
  out->set_completion_tokens(u.completion_tokens);
  out->set_cached_tokens(u.cached_tokens);
  out->set_seed(u.seed);
  out->set_time_to_first_token_s(u.time_to_first_token_s);
  out->set_total_time_s(u.total_time_s);
}

// Registers one method whose request arrives as `Wire` and is handed on as `Public`.
// `path` must outlive the server (gRPC keeps the pointer).
template <typename Wire, typename Public, typename Response, typename Fn>
grpc::internal::RpcServiceMethod* UnaryMethod(const char* path, InferenceServiceImpl* self,
                                              Fn fn) {
  return new grpc::internal::RpcServiceMethod(
      path, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<InferenceServiceImpl, Wire, Response>(
          [fn](InferenceServiceImpl* s, grpc::ServerContext* ctx, const Wire* wire,
               Response* resp) {
            Public req;
            if (absl::Status st = FromWire(*wire, &req); !st.ok()) return ToGrpc(st);
            return (s->*fn)(ctx, &req, resp);
          },
          self));
}

}  // namespace

absl::Status FromWire(const google::protobuf::Message& wire, google::protobuf::Message* out) {
  const google::protobuf::Descriptor* d = wire.GetDescriptor();
  const google::protobuf::Reflection* r = wire.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->type() != google::protobuf::FieldDescriptor::TYPE_BYTES) continue;
    const int n = f->is_repeated() ? r->FieldSize(wire, f) : 1;
    std::string scratch;  // (unused: generated messages hand out their own strings)
    for (int k = 0; k < n; ++k) {
      const std::string& v = f->is_repeated() ? r->GetRepeatedStringReference(wire, f, k, &scratch)
                                              : r->GetStringReference(wire, f, &scratch);
      if (!IsValidUtf8(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", f->name(), f->is_repeated() ? absl::StrCat("[", k, "]") : "",
                         "' is not valid UTF-8 text"));
      }
    }
  }
  if (!out->ParseFromString(wire.SerializeAsString())) {
    return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ",
                                                   out->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

InferenceServiceImpl::InferenceServiceImpl(ServingTarget* target, std::string api_key)
    : target_(target), api_key_(std::move(api_key)) {
  using grpc::internal::RpcMethod;
  using grpc::internal::RpcServiceMethod;
  // The method paths inference.proto gives, "/cascade.v1.Inference/Generate" and so on.
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Inference::service_full_name());
  auto path = [&](Method m, const char* name) {
    const google::protobuf::MethodDescriptor* md = service->FindMethodByName(name);
    paths_[static_cast<int>(m)] = absl::StrCat("/", service->full_name(), "/", md->name());
    return paths_[static_cast<int>(m)].c_str();
  };
  // The RpcServiceMethod objects (and their handlers) are owned by grpc::Service.
  AddMethod(new RpcServiceMethod(
      path(Method::kGenerate, "Generate"), RpcMethod::SERVER_STREAMING,
      new grpc::internal::ServerStreamingHandler<InferenceServiceImpl, v1::wire::GenerateRequest,
                                                 v1::GenerateResponse>(
          [](InferenceServiceImpl* s, grpc::ServerContext* ctx,
             const v1::wire::GenerateRequest* wire,
             grpc::ServerWriter<v1::GenerateResponse>* writer) {
            v1::GenerateRequest req;
            if (absl::Status st = FromWire(*wire, &req); !st.ok()) return ToGrpc(st);
            return s->Generate(ctx, &req, writer);
          },
          this)));
  AddMethod(UnaryMethod<v1::wire::GenerateRequest, v1::GenerateRequest, v1::CompleteResponse>(
      path(Method::kComplete, "Complete"), this, &InferenceServiceImpl::Complete));
  AddMethod(UnaryMethod<v1::wire::TokenizeRequest, v1::TokenizeRequest, v1::TokenizeResponse>(
      path(Method::kTokenize, "Tokenize"), this, &InferenceServiceImpl::Tokenize));
  AddMethod(
      UnaryMethod<v1::wire::DetokenizeRequest, v1::DetokenizeRequest, v1::DetokenizeResponse>(
          path(Method::kDetokenize, "Detokenize"), this, &InferenceServiceImpl::Detokenize));
  AddMethod(UnaryMethod<v1::ListModelsRequest, v1::ListModelsRequest, v1::ListModelsResponse>(
      path(Method::kListModels, "ListModels"), this, &InferenceServiceImpl::ListModels));
  AddMethod(UnaryMethod<v1::wire::GetModelInfoRequest, v1::GetModelInfoRequest, v1::ModelInfo>(
      path(Method::kGetModelInfo, "GetModelInfo"), this, &InferenceServiceImpl::GetModelInfo));
}

grpc::Status InferenceServiceImpl::Authorize(const grpc::ServerContext* ctx) const {
  if (api_key_.empty()) return grpc::Status::OK;
  if (!BearerMatches(PresentedMetadata(*ctx, "authorization"), api_key_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this API needs its key: metadata 'authorization: Bearer <key>'");
  }
  return grpc::Status::OK;
}

absl::Status InferenceServiceImpl::CheckModel(const std::string& model) {
  if (model.empty()) return absl::OkStatus();
  const std::string& id = target_->model().id();
  if (model != id) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' is not served here (serving '", id, "')"));
  }
  return absl::OkStatus();
}

grpc::Status InferenceServiceImpl::Run(grpc::ServerContext* ctx, const v1::GenerateRequest& req,
                                       const std::function<bool(const StreamEvent&)>& on_event,
                                       StreamHeader* header) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (absl::Status st = CheckModel(req.model()); !st.ok()) return ToGrpc(st);
  if (auto serving = target_->scheduler(); !serving.ok()) return ToGrpc(serving.status());
  auto spec = SpecFromProto(req);
  if (!spec.ok()) return ToGrpc(spec.status());
  auto expanded = ExpandSpec(*spec, target_->model().tokenizer());
  if (!expanded.ok()) return ToGrpc(expanded.status());
  auto scheduler = target_->SchedulerFor(expanded->front().request.prompt);
  if (!scheduler.ok()) return ToGrpc(scheduler.status());
  if (header != nullptr) {
    header->request_id = absl::StrCat("gen-", absl::Hex(RandomId(), absl::kZeroPad16));
    header->seed = expanded->front().request.sampling.seed;
  }
  auto stream = (*scheduler)->Submit(std::move(expanded->front().request));
  if (!stream.ok()) return ToGrpc(stream.status());
  std::optional<std::chrono::steady_clock::time_point> cancelled_at;
  for (;;) {
    std::optional<StreamEvent> e = (*stream)->Next(std::chrono::milliseconds(20));
    if (!e) {
      if (ctx->IsCancelled() && !cancelled_at) {  // client gone or deadline passed
        (*stream)->Cancel();
        cancelled_at = std::chrono::steady_clock::now();
      }
      if (cancelled_at &&
          std::chrono::steady_clock::now() - *cancelled_at > std::chrono::seconds(30)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      continue;
    }
    if (e->last && !e->status.ok()) {
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      return ToGrpc(e->status);
    }
    if (!on_event(*e)) (*stream)->Cancel();
    if (e->last) return grpc::Status::OK;
  }
}

grpc::Status InferenceServiceImpl::Generate(grpc::ServerContext* ctx,
                                            const v1::GenerateRequest* req,
                                            grpc::ServerWriter<v1::GenerateResponse>* writer) {
  StreamHeader header;
  bool first = true;
  return Run(ctx, *req, [&](const StreamEvent& e) {
    v1::GenerateResponse r;
    if (first) {
      r.set_request_id(header.request_id);
      r.set_seed(header.seed);
      first = false;
    }
    r.set_text(e.text);
    for (int32_t id : e.ids) r.add_token_ids(id);
    for (float lp : e.logprobs) r.add_logprobs(lp);
    for (const auto& top : e.top_logprobs) FillTop(top, r.add_top_logprobs());
    if (e.last) {
      r.set_finish_reason(FinishReasonToProto(e.finish));
      FillUsage(e.usage, r.mutable_usage());
    }
    return writer->Write(r);
  }, &header);
}

grpc::Status InferenceServiceImpl::Complete(grpc::ServerContext* ctx,
                                            const v1::GenerateRequest* req,
                                            v1::CompleteResponse* resp) {
  return Run(ctx, *req, [&](const StreamEvent& e) {
    resp->mutable_text()->append(e.text);
    for (int32_t id : e.ids) resp->add_token_ids(id);
    for (float lp : e.logprobs) resp->add_logprobs(lp);
    for (const auto& top : e.top_logprobs) FillTop(top, resp->add_top_logprobs());
    if (e.last) {
      resp->set_finish_reason(FinishReasonToProto(e.finish));
      FillUsage(e.usage, resp->mutable_usage());
    }
    return true;
  });
}

grpc::Status InferenceServiceImpl::Tokenize(grpc::ServerContext* ctx,
                                            const v1::TokenizeRequest* req,
                                            v1::TokenizeResponse* resp) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (absl::Status st = CheckModel(req->model()); !st.ok()) return ToGrpc(st);
  const Tokenizer* tok = &target_->model().tokenizer();
  if (req->text().size() > kMaxPromptBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "text is too long");
  }
  auto ids = tok->Encode(req->text(), req->add_special(), /*parse_special=*/true);
  if (!ids.ok()) return ToGrpc(ids.status());
  for (int32_t id : *ids) resp->add_ids(id);
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::Detokenize(grpc::ServerContext* ctx,
                                              const v1::DetokenizeRequest* req,
                                              v1::DetokenizeResponse* resp) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (absl::Status st = CheckModel(req->model()); !st.ok()) return ToGrpc(st);
  const Tokenizer* tok = &target_->model().tokenizer();
  std::vector<int32_t> ids;
  for (int32_t id : req->ids()) {
    if (!tok->IsValid(id)) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("id ", id, " is outside the vocabulary of ", tok->vocab_size()));
    }
    ids.push_back(id);
  }
  resp->set_text(tok->Decode(ids));
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::ListModels(grpc::ServerContext* ctx,
                                              const v1::ListModelsRequest*,
                                              v1::ListModelsResponse* resp) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  *resp->add_models() = target_->model_info();
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::GetModelInfo(grpc::ServerContext* ctx,
                                                const v1::GetModelInfoRequest* req,
                                                v1::ModelInfo* resp) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (absl::Status st = CheckModel(req->model()); !st.ok()) return ToGrpc(st);
  *resp = target_->model_info();
  return grpc::Status::OK;
}

}  // namespace cascade
