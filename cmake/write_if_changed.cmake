# kiln_write_if_changed(PATH CONTENT): writes CONTENT to PATH unless it already holds exactly that,
# so that a generated source whose inputs did not change is not recompiled. Shared by the embed
# scripts (the dashboard, the capability report, the Vulkan shaders).
function(kiln_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()
