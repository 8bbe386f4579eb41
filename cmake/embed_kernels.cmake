cmake_policy(SET CMP0057 NEW)
# Writes a C++ source that embeds OpenCL programs as string constants.
# Invoked at build time: cmake -DOUT=file.cc -DKERNEL_DIR=gpu/kernels -P ...
# Every *.cl file of KERNEL_DIR is a program, named after the file. A line
# `#include "name"` is replaced by that file of KERNEL_DIR (*.clh: kernel
# code shared by programs; *.h: constants shared with the host), each file
# at most once per program, so the embedded text is self-contained; *.clt
# files (code that macros set before it specialise) at every include.
file(GLOB SOURCES ${KERNEL_DIR}/*.cl)
list(SORT SOURCES)

# Sets the variable named by `out` to `file`'s text, includes expanded: the
# first `#include "x"` of each x is replaced by x's text, later ones by a
# comment. (String splicing, not CMake lists, which split kernel code at
# its semicolons and brackets.)
function(expand file out)
  file(READ ${file} text)
  # Directives start a line: a newline before the first makes it one too.
  set(text "\n${text}")
  set(done "")
  while(text MATCHES "\n#include \"([A-Za-z0-9_.]+)\"")
    set(directive "${CMAKE_MATCH_0}")
    set(inc "${CMAKE_MATCH_1}")
    if(inc IN_LIST done AND NOT inc MATCHES "\\.clt$")
      string(REPLACE "${directive}" "\n// ${inc}: included above" text
                     "${text}")
    else()
      if(NOT EXISTS ${KERNEL_DIR}/${inc})
        message(FATAL_ERROR "${file}: ${inc} is not in ${KERNEL_DIR}")
      endif()
      list(APPEND done "${inc}")
      file(READ ${KERNEL_DIR}/${inc} inner)
      string(FIND "${text}" "${directive}" at)
      string(LENGTH "${directive}" skip)
      string(SUBSTRING "${text}" 0 ${at} before)
      math(EXPR rest "${at} + ${skip}")
      string(SUBSTRING "${text}" ${rest} -1 after)
      set(text "${before}\n// ---- ${inc}\n${inner}// ---- end of ${inc}${after}")
    endif()
  endwhile()
  string(SUBSTRING "${text}" 1 -1 text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(body "// Generated from gpu/kernels/*.cl by cmake/embed_kernels.cmake.\n")
string(APPEND body "#include \"gpu/kernel_sources.h\"\n\nnamespace sortd::gpu {\n")
set(table "")
foreach(src ${SOURCES})
  get_filename_component(name ${src} NAME_WE)
  expand(${src} text)
  # Raw string literal chunks stay below compilers' literal length limits.
  string(LENGTH "${text}" len)
  set(chunks "")
  set(pos 0)
  while(pos LESS len)
    string(SUBSTRING "${text}" ${pos} 8000 piece)
    string(APPEND chunks "R\"sortdcl(${piece})sortdcl\"\n")
    math(EXPR pos "${pos} + 8000")
  endwhile()
  string(APPEND body "static const char k_${name}[] =\n${chunks};\n")
  string(APPEND table "    {\"${name}\", k_${name}},\n")
endforeach()
string(APPEND body "\nconst std::vector<KernelSource>& KernelSources() {\n")
string(APPEND body "  static const std::vector<KernelSource> sources = {\n${table}  };\n")
string(APPEND body "  return sources;\n}\n\n}  // namespace sortd::gpu\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
