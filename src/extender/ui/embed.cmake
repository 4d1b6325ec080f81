# embed.cmake -- turns a file into a C header holding its bytes, so the
# extender serves /ui without reading anything at run time.
#   cmake -DINPUT=index.html -DOUTPUT=ui_page.h -DNAME=ui_page -P embed.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the one long line every 24 bytes (120 characters) for compilers and readers.
string(REGEX REPLACE "((0x..,){24})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "/* Generated from ${INPUT} by embed.cmake: do not edit. */\n"
  "static const unsigned char ${NAME}[${size} + 1] = {\n${bytes}0x00};\n"
  "#define ${NAME}_len ((size_t)${size})\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
