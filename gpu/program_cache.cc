#include "gpu/program_cache.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpu/kernel_sources.h"

namespace sortd::gpu {
namespace {

constexpr char kMagic[8] = {'S', 'O', 'R', 'T', 'D', 'C', 'L', '1'};

// FNV-1a, 64 bits: a cache key and a checksum, not a security boundary.
uint64_t Fnv1a(const void* data, size_t size,
               uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t Fnv1a(const std::string& s, uint64_t h) {
  return Fnv1a(s.data(), s.size(), Fnv1a("\x1f", 1, h));
}

}  // namespace

ProgramCache::ProgramCache(cl::Context context, Device device,
                           std::string disk_dir, Diagnostics diagnostics)
    : context_(std::move(context)),
      device_(std::move(device)),
      disk_dir_(std::move(disk_dir)),
      diagnostics_(std::move(diagnostics)) {}

std::string ProgramCache::DiskPath(const std::string& source_name,
                                   const std::string& options) const {
  const char* source = FindKernelSource(source_name);
  uint64_t h = Fnv1a(device_.info.platform, 1469598103934665603ull);
  h = Fnv1a(device_.info.platform_version, h);
  h = Fnv1a(device_.info.name, h);
  h = Fnv1a(device_.info.driver, h);
  h = Fnv1a(options, h);
  h = Fnv1a(source ? std::string(source) : std::string(), h);
  return absl::StrFormat("%s/%s-%016x.clbin", disk_dir_, source_name, h);
}

absl::StatusOr<cl::Program> ProgramCache::Get(
    const std::string& source_name, const std::string& build_options) {
  const std::string& extra = diagnostics_.extra_options;
  const std::string options =
      extra.empty() ? build_options : absl::StrCat(build_options, " ", extra);
  MutexLock lock(&mu_);
  auto key = std::make_pair(source_name, options);
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;

  absl::StatusOr<cl::Program> program = absl::NotFoundError("no disk cache");
  const std::string path =
      disk_dir_.empty() ? std::string() : DiskPath(source_name, options);
  if (!path.empty() && std::filesystem::exists(path)) {
    program = LoadFromDisk(path);
    if (program.ok()) {
      ++stats_.loaded_from_disk;
    } else {
      ++stats_.disk_entries_rejected;
      std::fprintf(stderr, "sortd: kernel cache: rebuilding %s: %s\n",
                   path.c_str(),
                   std::string(program.status().message()).c_str());
    }
  }
  if (!program.ok()) {
    program = Build(source_name, options);
    if (!program.ok()) return program.status();
    ++stats_.built_from_source;
    if (!path.empty()) SaveToDisk(*program, path);
  }
  programs_.emplace(key, *program);
  return program;
}

ProgramCache::Stats ProgramCache::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<cl::Program> ProgramCache::Build(const std::string& source_name,
                                                const std::string& options) {
  const char* source = FindKernelSource(source_name);
  if (source == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no kernel source named ", source_name));
  }
  cl_int err = CL_SUCCESS;
  cl::Program program(context_, std::string(source), /*build=*/false, &err);
  SORTD_CL_RETURN_IF(
      err, absl::StrCat("clCreateProgramWithSource(", source_name, ")"));
  err = program.build({device_.device}, options.c_str());
  if (err == CL_SUCCESS && diagnostics_.print_build_log) {
    std::fprintf(
        stderr, "sortd: built %s.cl with '%s':\n%s\n", source_name.c_str(),
        options.c_str(),
        program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(device_.device).c_str());
  }
  if (err != CL_SUCCESS) {
    std::string log =
        program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(device_.device);
    return absl::InternalError(
        absl::StrCat("building ", source_name, ".cl with '", options,
                     "' failed: ", ClErrorName(err), "\n", log));
  }
  return program;
}

absl::StatusOr<cl::Program> ProgramCache::LoadFromDisk(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  constexpr size_t kHeader = sizeof(kMagic) + 16;
  if (file.size() < kHeader || std::memcmp(file.data(), kMagic, 8) != 0) {
    return absl::DataLossError("not a sortd kernel cache entry");
  }
  uint64_t size, checksum;
  std::memcpy(&size, file.data() + 8, 8);
  std::memcpy(&checksum, file.data() + 16, 8);
  if (size != file.size() - kHeader ||
      Fnv1a(file.data() + kHeader, size) != checksum) {
    return absl::DataLossError("truncated or corrupt");
  }
  std::vector<unsigned char> binary(file.begin() + kHeader, file.end());
  cl_int err = CL_SUCCESS;
  std::vector<cl_int> binary_status;
  cl::Program program(context_, {device_.device}, {binary}, &binary_status,
                      &err);
  SORTD_CL_RETURN_IF(err, "clCreateProgramWithBinary");
  SORTD_CL_RETURN_IF(program.build({device_.device}),
                     "clBuildProgram (binary)");
  return program;
}

void ProgramCache::SaveToDisk(const cl::Program& program,
                              const std::string& path) {
  std::vector<std::vector<unsigned char>> binaries;
  if (program.getInfo(CL_PROGRAM_BINARIES, &binaries) != CL_SUCCESS ||
      binaries.size() != 1 || binaries[0].empty()) {
    return;  // The driver offers no binary: stay memory-only.
  }
  std::error_code ec;
  std::filesystem::create_directories(disk_dir_, ec);
  const std::vector<unsigned char>& b = binaries[0];
  const uint64_t size = b.size();
  const uint64_t checksum = Fnv1a(b.data(), b.size());
  // Write then rename, so a crash leaves no half-written entry behind.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&checksum), 8);
    out.write(reinterpret_cast<const char*>(b.data()), b.size());
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace sortd::gpu
