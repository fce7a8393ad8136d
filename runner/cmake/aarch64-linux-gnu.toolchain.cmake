# Cross-compiling the runner for 64-bit Arm Linux with Debian's
# g++-aarch64-linux-gnu, against the manylinux_2_28_aarch64 executorch wheel
# given in CMAKE_PREFIX_PATH.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# The wheel lives outside the sysroot: let find_package look in CMAKE_PREFIX_PATH as given.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
