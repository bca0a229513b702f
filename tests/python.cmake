# The tests' Python: one interpreter that imports h5py and numpy (MPITRON_PYTHON, handed to every
# test as the PYTHON environment variable) and one that also imports torch (MPITRON_TORCH_PYTHON,
# for the oracles). find_package(Python3) checks no modules, and the interpreters differ by
# machine: here only /usr/bin/python3 sees Debian's h5py and torch, on the GPU machine only the
# python3 on PATH has them. So each candidate is tried in order, with -c "import ...", and the
# first that imports every module wins: $PYTHON, then python3 on PATH, then /usr/bin/python3.
# Either can be given: -DMPITRON_PYTHON=... -DMPITRON_TORCH_PYTHON=...

# mpitron_find_python(VAR "modules" WHY): sets VAR (a cache entry where given, else found now).
function(mpitron_find_python var modules why)
  if(${var})
    message(STATUS "${var}: ${${var}} (given)")
    return()
  endif()
  find_program(_path_python3 NAMES python3 NO_CACHE)
  set(tried "")
  foreach(candidate "$ENV{PYTHON}" "${_path_python3}" /usr/bin/python3)
    if(NOT candidate OR candidate IN_LIST tried OR NOT EXISTS "${candidate}")
      continue()
    endif()
    list(APPEND tried "${candidate}")
    execute_process(COMMAND "${candidate}" -c "import ${modules}" RESULT_VARIABLE rc
                    OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
    if(rc EQUAL 0)
      message(STATUS "${var}: ${candidate} (imports ${modules})")
      set(${var} "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  string(REPLACE ";" ", " tried "${tried}")
  message(STATUS "${var}: none of [${tried}] imports ${modules}: ${why}")
  set(${var} "" PARENT_SCOPE)
endfunction()

mpitron_find_python(MPITRON_PYTHON "h5py, numpy"
                    "the end-to-end tests that read traces fail (apt-get install python3-h5py)")
mpitron_find_python(MPITRON_TORCH_PYTHON "torch, h5py, numpy"
                    "the PyTorch oracle tests skip (apt-get install python3-torch python3-h5py)")
if(NOT MPITRON_PYTHON)
  # The scripts say which modules are missing when they first need Python.
  set(MPITRON_PYTHON python3)
endif()

# The oracles run under the torch interpreter; without one, under MPITRON_PYTHON, where each oracle
# script says which module it cannot import and exits 77 (CTest's skip).
if(MPITRON_TORCH_PYTHON)
  set(MPITRON_ORACLE_PYTHON ${MPITRON_TORCH_PYTHON})
else()
  set(MPITRON_ORACLE_PYTHON ${MPITRON_PYTHON})
endif()

# Tests of the validate/ scripts (label unit): tests/<script> WORKDIR under MPITRON_PYTHON; each
# exits 77 (CTest's skip) where a module it needs, such as matplotlib, is missing.
function(mpitron_python_test name script timeout)
  add_test(NAME ${name} COMMAND ${MPITRON_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/${script}
                                ${CMAKE_BINARY_DIR}/python_tests/${name})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${timeout} SKIP_RETURN_CODE 77)
endfunction()
mpitron_python_test(plot_loss_layout plot_loss_test.py 120)
