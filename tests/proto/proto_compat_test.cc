// sortd.v1 only grows: a client built against any release still talks to
// this server. Every descriptor set in proto/released/ (one per release,
// written by protoc --descriptor_set_out when the release is cut) is
// compared with the proto compiled into this build. A message, field, enum
// value or method of a release must still exist with the same number, name,
// type and cardinality; a field or value may only go when its number and
// name are reserved.

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd {
namespace {

using google::protobuf::DescriptorProto;
using google::protobuf::EnumDescriptorProto;
using google::protobuf::FieldDescriptorProto;
using google::protobuf::FileDescriptorProto;
using google::protobuf::FileDescriptorSet;
using google::protobuf::ServiceDescriptorProto;
using Problems = std::vector<std::string>;

template <typename Proto>
bool Reserved(const Proto& now, int number, const std::string& name) {
  bool number_reserved = false;
  for (const auto& r : now.reserved_range()) {
    // Message ranges end exclusive, enum ranges inclusive.
    const int end =
        std::is_same_v<Proto, DescriptorProto> ? r.end() - 1 : r.end();
    number_reserved |= r.start() <= number && number <= end;
  }
  bool name_reserved = false;
  for (const std::string& n : now.reserved_name()) name_reserved |= n == name;
  return number_reserved && name_reserved;
}

std::string Oneof(const DescriptorProto& m, const FieldDescriptorProto& f) {
  return f.has_oneof_index() ? m.oneof_decl(f.oneof_index()).name() : "";
}

void CompareField(const std::string& where, const DescriptorProto& old_m,
                  const FieldDescriptorProto& was, const DescriptorProto& now_m,
                  const FieldDescriptorProto& is, Problems* problems) {
  const std::string at = absl::StrCat(where, " field ", was.number());
  if (is.name() != was.name()) {
    problems->push_back(
        absl::StrCat(at, " renamed ", was.name(), " -> ", is.name()));
  }
  if (is.type() != was.type() || is.type_name() != was.type_name()) {
    problems->push_back(absl::StrCat(at, " (", was.name(), ") changed type"));
  }
  if (is.label() != was.label()) {
    problems->push_back(
        absl::StrCat(at, " (", was.name(), ") changed cardinality"));
  }
  if (Oneof(now_m, is) != Oneof(old_m, was)) {
    problems->push_back(
        absl::StrCat(at, " (", was.name(), ") moved in or out of a oneof"));
  }
}

void CompareEnum(const std::string& scope, const EnumDescriptorProto& was,
                 const EnumDescriptorProto& is, Problems* problems) {
  const std::string where = absl::StrCat(scope, ".", was.name());
  std::map<int, const google::protobuf::EnumValueDescriptorProto*> values;
  for (const auto& v : is.value()) values.emplace(v.number(), &v);
  for (const auto& v : was.value()) {
    auto it = values.find(v.number());
    if (it == values.end()) {
      if (!Reserved(is, v.number(), v.name())) {
        problems->push_back(absl::StrCat(where, " value ", v.name(), " = ",
                                         v.number(), " removed"));
      }
    } else if (it->second->name() != v.name()) {
      problems->push_back(absl::StrCat(where, " value ", v.number(),
                                       " renamed ", v.name(), " -> ",
                                       it->second->name()));
    }
  }
}

template <typename Proto>
const Proto* Named(const google::protobuf::RepeatedPtrField<Proto>& all,
                   const std::string& name) {
  for (const Proto& p : all) {
    if (p.name() == name) return &p;
  }
  return nullptr;
}

void CompareEnums(
    const std::string& scope,
    const google::protobuf::RepeatedPtrField<EnumDescriptorProto>& was,
    const google::protobuf::RepeatedPtrField<EnumDescriptorProto>& is,
    Problems* problems) {
  for (const EnumDescriptorProto& e : was) {
    const EnumDescriptorProto* now = Named(is, e.name());
    if (now == nullptr) {
      problems->push_back(absl::StrCat(scope, ".", e.name(), " removed"));
    } else {
      CompareEnum(scope, e, *now, problems);
    }
  }
}

void CompareMessage(const std::string& scope, const DescriptorProto& was,
                    const DescriptorProto& is, Problems* problems) {
  const std::string where = absl::StrCat(scope, ".", was.name());
  std::map<int, const FieldDescriptorProto*> fields;
  for (const auto& f : is.field()) fields.emplace(f.number(), &f);
  for (const auto& f : was.field()) {
    auto it = fields.find(f.number());
    if (it != fields.end()) {
      CompareField(where, was, f, is, *it->second, problems);
    } else if (!Reserved(is, f.number(), f.name())) {
      problems->push_back(absl::StrCat(where, " field ", f.name(), " = ",
                                       f.number(),
                                       " removed without reserving it"));
    }
  }
  for (const DescriptorProto& nested : was.nested_type()) {
    const DescriptorProto* now = Named(is.nested_type(), nested.name());
    if (now == nullptr) {
      problems->push_back(absl::StrCat(where, ".", nested.name(), " removed"));
    } else {
      CompareMessage(where, nested, *now, problems);
    }
  }
  CompareEnums(where, was.enum_type(), is.enum_type(), problems);
}

void CompareService(const std::string& scope, const ServiceDescriptorProto& was,
                    const ServiceDescriptorProto& is, Problems* problems) {
  for (const auto& m : was.method()) {
    const std::string where =
        absl::StrCat(scope, ".", was.name(), ".", m.name());
    const auto* now = Named(is.method(), m.name());
    if (now == nullptr) {
      problems->push_back(absl::StrCat(where, " removed"));
    } else if (now->input_type() != m.input_type() ||
               now->output_type() != m.output_type()) {
      problems->push_back(absl::StrCat(where, " changed its message types"));
    } else if (now->client_streaming() != m.client_streaming() ||
               now->server_streaming() != m.server_streaming()) {
      problems->push_back(absl::StrCat(where, " changed its streaming"));
    }
  }
}

// What a client built against `was` would find broken in `is`.
Problems Incompatibilities(const FileDescriptorProto& was,
                           const FileDescriptorProto& is) {
  Problems problems;
  if (is.package() != was.package()) {
    problems.push_back(
        absl::StrCat("package ", was.package(), " -> ", is.package()));
  }
  const std::string scope = was.package();
  for (const DescriptorProto& m : was.message_type()) {
    const DescriptorProto* now = Named(is.message_type(), m.name());
    if (now == nullptr) {
      problems.push_back(absl::StrCat(scope, ".", m.name(), " removed"));
    } else {
      CompareMessage(scope, m, *now, &problems);
    }
  }
  CompareEnums(scope, was.enum_type(), is.enum_type(), &problems);
  for (const ServiceDescriptorProto& s : was.service()) {
    const ServiceDescriptorProto* now = Named(is.service(), s.name());
    if (now == nullptr) {
      problems.push_back(absl::StrCat(scope, ".", s.name(), " removed"));
    } else {
      CompareService(scope, s, *now, &problems);
    }
  }
  return problems;
}

FileDescriptorProto Current() {
  FileDescriptorProto file;
  v1::SortRequest::descriptor()->file()->CopyTo(&file);
  return file;
}

std::vector<std::filesystem::path> Releases() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry :
       std::filesystem::directory_iterator(SORTD_RELEASED_PROTOS)) {
    if (entry.path().extension() == ".binpb") paths.push_back(entry.path());
  }
  return paths;
}

TEST(ProtoCompat, EveryReleaseIsASubsetOfThisProto) {
  const std::vector<std::filesystem::path> releases = Releases();
  ASSERT_FALSE(releases.empty())
      << "no descriptor set in " << SORTD_RELEASED_PROTOS;
  const FileDescriptorProto now = Current();
  for (const auto& path : releases) {
    SCOPED_TRACE(path.string());
    std::ifstream in(path, std::ios::binary);
    FileDescriptorSet set;
    ASSERT_TRUE(set.ParseFromIstream(&in));
    const FileDescriptorProto* was = Named(set.file(), now.name());
    ASSERT_NE(was, nullptr) << "no " << now.name() << " in the set";
    EXPECT_THAT(Incompatibilities(*was, now), ::testing::IsEmpty());
  }
}

DescriptorProto* Message(FileDescriptorProto& file, const std::string& name) {
  for (DescriptorProto& m : *file.mutable_message_type()) {
    if (m.name() == name) return &m;
  }
  ADD_FAILURE() << "no message " << name;
  return file.add_message_type();
}

// Each change that would break an old client is named; additions are not.
TEST(ProtoCompat, BreakingChangesAreNamedAndAdditionsAreNot) {
  const FileDescriptorProto was = Current();
  const DescriptorProto* request_was = Named(was.message_type(), "SortRequest");
  ASSERT_NE(request_was, nullptr);
  ASSERT_GT(request_was->field_size(), 2);
  using ::testing::ElementsAre;
  using ::testing::HasSubstr;

  FileDescriptorProto grown = was;
  auto* added = Message(grown, "SortRequest")->add_field();
  added->set_name("a_new_field");
  added->set_number(999);
  added->set_type(FieldDescriptorProto::TYPE_BOOL);
  added->set_label(FieldDescriptorProto::LABEL_OPTIONAL);
  grown.add_message_type()->set_name("ANewMessage");
  EXPECT_THAT(Incompatibilities(was, grown), ::testing::IsEmpty());

  FileDescriptorProto renumbered = was;
  auto* field = Message(renumbered, "SortRequest")->mutable_field(0);
  field->set_number(field->number() + 1000);
  EXPECT_THAT(Incompatibilities(was, renumbered),
              ElementsAre(HasSubstr("removed without reserving")));

  FileDescriptorProto retyped = was;
  field = Message(retyped, "SortRequest")->mutable_field(1);
  field->set_type(field->type() == FieldDescriptorProto::TYPE_STRING
                      ? FieldDescriptorProto::TYPE_BYTES
                      : FieldDescriptorProto::TYPE_STRING);
  field->clear_type_name();
  EXPECT_THAT(Incompatibilities(was, retyped),
              ElementsAre(HasSubstr("changed type")));

  FileDescriptorProto reserved = was;
  DescriptorProto* request = Message(reserved, "SortRequest");
  const FieldDescriptorProto gone = request->field(0);
  request->mutable_field()->erase(request->mutable_field()->begin());
  EXPECT_THAT(Incompatibilities(was, reserved),
              ElementsAre(HasSubstr("removed without reserving")));
  auto* range = request->add_reserved_range();
  range->set_start(gone.number());
  range->set_end(gone.number() + 1);
  request->add_reserved_name(gone.name());
  EXPECT_THAT(Incompatibilities(was, reserved), ::testing::IsEmpty());

  FileDescriptorProto streaming = was;
  auto* method = streaming.mutable_service(0)->mutable_method(0);
  method->set_server_streaming(!method->server_streaming());
  EXPECT_THAT(Incompatibilities(was, streaming),
              ElementsAre(HasSubstr("changed its streaming")));

  FileDescriptorProto no_method = was;
  no_method.mutable_service(0)->mutable_method()->RemoveLast();
  EXPECT_THAT(Incompatibilities(was, no_method),
              ElementsAre(HasSubstr("removed")));
}

// Enum values keep their numbers and names.
TEST(ProtoCompat, EnumValuesKeepTheirNumbersAndNames) {
  const FileDescriptorProto was = Current();
  ASSERT_GT(was.enum_type_size(), 0);
  ASSERT_GT(was.enum_type(0).value_size(), 1);

  FileDescriptorProto renamed = was;
  auto* value = renamed.mutable_enum_type(0)->mutable_value(1);
  value->set_name(value->name() + "_RENAMED");
  EXPECT_THAT(Incompatibilities(was, renamed),
              ElementsAre(::testing::HasSubstr("renamed")));

  FileDescriptorProto dropped = was;
  dropped.mutable_enum_type(0)->mutable_value()->RemoveLast();
  EXPECT_THAT(Incompatibilities(was, dropped),
              ElementsAre(::testing::HasSubstr("removed")));
}

}  // namespace
}  // namespace sortd
