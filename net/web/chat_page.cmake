# Embeds the chat page (this folder) into troupe_net: at build time embed.cmake inlines chat.css
# and chat.js into index.html and writes it as bytes into a generated .cpp, which
# net/chat_page.cpp serves. Edit the files here; no other build step.
set(TROUPE_WEB_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TROUPE_WEB_CPP ${CMAKE_BINARY_DIR}/generated/chat_page_data.cpp)
add_custom_command(
  OUTPUT ${TROUPE_WEB_CPP}
  COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${TROUPE_WEB_DIR} -DOUT=${TROUPE_WEB_CPP} -P ${TROUPE_WEB_DIR}/embed.cmake
  DEPENDS ${TROUPE_WEB_DIR}/index.html ${TROUPE_WEB_DIR}/chat.css ${TROUPE_WEB_DIR}/chat.js
          ${TROUPE_WEB_DIR}/embed.cmake
  COMMENT "Embedding the chat page (net/web)"
  VERBATIM)
target_sources(troupe_net PRIVATE ${TROUPE_WEB_CPP})
