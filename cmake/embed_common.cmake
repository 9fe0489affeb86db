# Shared by the embed_*.cmake scripts: a JSON Lines file as the body of one std::string, written as
# raw-literal pieces of 8,000 characters (compilers cap the length of one string literal).
function(moemem_append_jsonl_pieces body_var text)
  string(LENGTH "${text}" n)
  set(body "${${body_var}}")
  set(pos 0)
  while(pos LESS n)
    string(SUBSTRING "${text}" ${pos} 8000 piece)
    string(APPEND body "\n    + R\"moemem_jsonl(${piece})moemem_jsonl\"")
    math(EXPR pos "${pos} + 8000")
  endwhile()
  set(${body_var} "${body}" PARENT_SCOPE)
endfunction()

# Writes OUT only when its text changed, so that an unchanged input rebuilds nothing.
function(moemem_write_if_changed out body)
  file(WRITE ${out}.tmp "${body}")
  file(COPY_FILE ${out}.tmp ${out} ONLY_IF_DIFFERENT)
endfunction()
