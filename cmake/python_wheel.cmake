# The Python client (client/python) as a wheel,
# python/dist/sortd-<version>-py3-none-any.whl, and its source
# distribution beside it, built offline with Debian's python3 and
# python3-grpc-tools (the stubs generated from proto/, sortd/_version.py
# from VERSION). Part of the default build where that python3 has
# grpc_tools, pip, setuptools and wheel; SORTD_PYTHON_WHEEL names the wheel
# (empty where it is not built).
#
# Built from a copy laid out as the source distribution (the package,
# VERSION and the proto files side by side), so that the source tree gets
# no build output.
find_program(SORTD_SYSTEM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
set(SORTD_PYTHON_WHEEL "")
if(SORTD_SYSTEM_PYTHON3)
  execute_process(
    COMMAND ${SORTD_SYSTEM_PYTHON3} -c
      "import setuptools, wheel, grpc_tools.protoc, importlib.util as u; assert u.find_spec('pip')"
    RESULT_VARIABLE sortd_python_missing OUTPUT_QUIET ERROR_QUIET)
  if(sortd_python_missing)
    message(STATUS "python_wheel: ${SORTD_SYSTEM_PYTHON3} lacks grpc_tools, "
      "pip, setuptools or wheel (scripts/install-deps.sh); not built")
  else()
    set(src ${PROJECT_SOURCE_DIR}/client/python)
    set(stage ${CMAKE_BINARY_DIR}/python/src)
    set(dist ${CMAKE_BINARY_DIR}/python/dist)
    set(SORTD_PYTHON_WHEEL ${dist}/sortd-${PROJECT_VERSION}-py3-none-any.whl)
    set(sdist ${dist}/sortd-${PROJECT_VERSION}.tar.gz)
    file(GLOB package_files CONFIGURE_DEPENDS ${src}/sortd/*.py)
    set(protos sortd/v1/sortd.proto grpc/health/v1/health.proto)
    set(copy_protos)
    foreach(p IN LISTS protos)
      list(APPEND copy_protos COMMAND ${CMAKE_COMMAND} -E copy
        ${PROJECT_SOURCE_DIR}/proto/${p} ${stage}/proto/${p})
    endforeach()
    list(TRANSFORM protos PREPEND ${PROJECT_SOURCE_DIR}/proto/
      OUTPUT_VARIABLE proto_paths)
    add_custom_command(
      OUTPUT ${SORTD_PYTHON_WHEEL} ${sdist}
      COMMAND ${CMAKE_COMMAND} -E rm -rf ${stage} ${dist}
      COMMAND ${CMAKE_COMMAND} -E copy_directory ${src}/sortd ${stage}/sortd
      COMMAND ${CMAKE_COMMAND} -E copy ${src}/setup.py ${src}/pyproject.toml
        ${src}/README.md ${PROJECT_SOURCE_DIR}/VERSION ${stage}
      ${copy_protos}
      COMMAND ${CMAKE_COMMAND} -E rm -rf ${stage}/sortd/__pycache__
      COMMAND ${SORTD_SYSTEM_PYTHON3} -m pip wheel -q --no-index --no-deps
        --no-build-isolation --no-cache-dir -w ${dist} ${stage}
      COMMAND ${CMAKE_COMMAND} -E chdir ${stage} ${SORTD_SYSTEM_PYTHON3} -c
        "from setuptools import build_meta as b; b.build_sdist('${dist}')"
      DEPENDS ${package_files} ${src}/setup.py ${src}/pyproject.toml
        ${src}/README.md ${PROJECT_SOURCE_DIR}/VERSION ${proto_paths}
      COMMENT "Building the Python wheel sortd-${PROJECT_VERSION}"
      VERBATIM)
    add_custom_target(python_wheel ALL
      DEPENDS ${SORTD_PYTHON_WHEEL} ${sdist})
  endif()
endif()
