# kiln_write_if_changed(PATH CONTENT): writes CONTENT to PATH unless it already holds exactly that,
# so that a generated source whose inputs did not change is not recompiled. Shared by the embed
# scripts (embed_ui.cmake, embed_report.cmake).
function(kiln_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()
