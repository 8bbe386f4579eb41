#include "server/reflection_v1.h"

#include <set>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace sortd {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
namespace v1 = grpc::reflection::v1;

// `file` and every file it imports, each once, serialized.
void AddFileWithImports(const FileDescriptor* file, std::set<std::string>* seen,
                        v1::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileWithImports(file->dependency(i), seen, out);
  }
}

void SetError(grpc::StatusCode code, const std::string& message,
              v1::ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

// The file that defines the extension `ext` names; null if none does.
const FileDescriptor* FileOfExtension(const DescriptorPool& pool,
                                      const v1::ExtensionRequest& ext) {
  const auto* type = pool.FindMessageTypeByName(ext.containing_type());
  const auto* field = type == nullptr ? nullptr
                                      : pool.FindExtensionByNumber(
                                            type, ext.extension_number());
  return field == nullptr ? nullptr : field->file();
}

// The extension numbers of the message type `type_name`, or NOT_FOUND.
void AnswerExtensionNumbers(const DescriptorPool& pool,
                            const std::string& type_name,
                            v1::ServerReflectionResponse* response) {
  const auto* type = pool.FindMessageTypeByName(type_name);
  if (type == nullptr) {
    SetError(grpc::StatusCode::NOT_FOUND, "no message type " + type_name,
             response);
    return;
  }
  std::vector<const google::protobuf::FieldDescriptor*> extensions;
  pool.FindAllExtensions(type, &extensions);
  auto* out = response->mutable_all_extension_numbers_response();
  out->set_base_type_name(type->full_name());
  for (const auto* e : extensions) out->add_extension_number(e->number());
}

}  // namespace

v1::ServerReflectionResponse ReflectionV1::Answer(
    const v1::ServerReflectionRequest& request) const {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  v1::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  const FileDescriptor* file = nullptr;
  std::string what;
  switch (request.message_request_case()) {
    case v1::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(
            name);
      }
      return response;
    case v1::ServerReflectionRequest::kFileByFilename:
      file = pool->FindFileByName(request.file_by_filename());
      what = "no file named " + request.file_by_filename();
      break;
    case v1::ServerReflectionRequest::kFileContainingSymbol:
      file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      what = "no symbol " + request.file_containing_symbol();
      break;
    case v1::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      file = FileOfExtension(*pool, ext);
      what = "no extension " + std::to_string(ext.extension_number()) + " of " +
             ext.containing_type();
      break;
    }
    case v1::ServerReflectionRequest::kAllExtensionNumbersOfType:
      AnswerExtensionNumbers(*pool, request.all_extension_numbers_of_type(),
                             &response);
      return response;
    default:
      SetError(grpc::StatusCode::INVALID_ARGUMENT,
               "a reflection request names no question", &response);
      return response;
  }
  if (file == nullptr) {
    SetError(grpc::StatusCode::NOT_FOUND, what, &response);
    return response;
  }
  std::set<std::string> seen;
  AddFileWithImports(file, &seen, response.mutable_file_descriptor_response());
  return response;
}

grpc::Status ReflectionV1::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::ServerReflectionResponse,
                             v1::ServerReflectionRequest>* stream) {
  v1::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    if (!stream->Write(Answer(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace sortd
