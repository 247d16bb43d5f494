# FindNCCL: NCCL ships no CMake config. Looks, in this order, in NCCL_ROOT and NCCL_HOME (CMake
# variables or environment), the CUDA toolkit's prefix, the system, and the Python wheel
# nvidia-nccl-cu* (whose lib/ holds only libnccl.so.2, no libnccl.so). NCCL_INCLUDE_DIR and
# NCCL_LIBRARY may also be given directly. Provides NCCL_FOUND, NCCL_VERSION (from nccl.h),
# NCCL_FOUND_IN (where it was found, for the configure summary) and the imported target NCCL::nccl.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME}
  ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_ROOT} /usr/local/cuda)
# NVIDIA's wheel, when a python3 with it is on the PATH (pip install nvidia-nccl-cu13, or PyTorch).
find_program(_nccl_python NAMES python3 python)
mark_as_advanced(_nccl_python)
if(_nccl_python)
  execute_process(
    COMMAND ${_nccl_python} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
    OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND IS_DIRECTORY "${_nccl_wheel}")
    list(APPEND _nccl_hints "${_nccl_wheel}")
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_major REGEX "^#define NCCL_MAJOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_minor REGEX "^#define NCCL_MINOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_patch REGEX "^#define NCCL_PATCH +[0-9]+")
  string(REGEX REPLACE ".* ([0-9]+)" "\\1" _nccl_major "${_nccl_major}")
  string(REGEX REPLACE ".* ([0-9]+)" "\\1" _nccl_minor "${_nccl_minor}")
  string(REGEX REPLACE ".* ([0-9]+)" "\\1" _nccl_patch "${_nccl_patch}")
  set(NCCL_VERSION "${_nccl_major}.${_nccl_minor}.${_nccl_patch}")
endif()
if(NCCL_LIBRARY)
  get_filename_component(_nccl_real "${NCCL_LIBRARY}" REALPATH)
  set(NCCL_FOUND_IN "${_nccl_real} (headers: ${NCCL_INCLUDE_DIR})")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
