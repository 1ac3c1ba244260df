# flatc's object API packs an empty std::vector as an absent field, but ExecuTorch's program
# verifier needs every vector present (a 0-d tensor's empty sizes, a method without inputs), as
# ExecuTorch's own serializer writes them: this makes the generated Pack() functions always
# create the vector. Run as `cmake -DFILE=<generated header> -P flatbuffers_always_vectors.cmake`.
file(READ "${FILE}" text)
string(REGEX REPLACE "= _o->[a-z_]+\\.size\\(\\) \\? ([^\n]*) : 0;" "= \\1;" text "${text}")
file(WRITE "${FILE}" "${text}")
