# Tokenizer sources and tests, included by model/CMakeLists.txt (part of cascade_model).
set(CASCADE_TOKENIZER_SOURCES
)
set(CASCADE_TOKENIZER_TESTS
)
