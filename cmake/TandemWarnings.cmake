# Warnings for tandem's own targets (never for generated or third-party code), and the
# floating-point rules of PROTOCOLS §5: no FMA contraction, no fast-math, no -march=native.
function(tandem_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter -ffp-contract=off>
    # errno from sqrt is never read; without it the optimizer loops vectorise (sqrtps is
    # correctly rounded, so results do not change).
    $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)
  # GCC 12's -Wrestrict misfires inside libstdc++'s std::string at -O2/-O3 (GCC PR105329).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  # A test executable's own code is assertions and set-up; what it tests lives in the libraries,
  # compiled at the build type's level. Its TUs (half the build's compile time) then compile in
  # ~0.55x the time of -O3: CI on 2 cores spends ~2 minutes less building.
  if(target MATCHES "_tests$" AND TANDEM_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<CONFIG:Debug>>>:${TANDEM_TEST_OPTIMIZE}>)
  endif()
endfunction()
