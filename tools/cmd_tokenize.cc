// `cascade tokenize` and `cascade detokenize`: text <-> ids with a model's tokenizer.
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "model/tokenizer.h"
#include "tools/commands.h"

namespace cascade::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  bool no_bos = false;
  bool no_parse_special = false;
  bool special = false;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  return Tokenizer::FromPath(path);
}

int RunTokenize(const TokenizeFlags& f) {
  auto tok = LoadTokenizer(f.model);
  if (!tok.ok()) {
    std::cerr << "cascade tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto ids = (*tok)->Encode(text, !f.no_bos, !f.no_parse_special);
  if (!ids.ok()) {
    std::cerr << "cascade tokenize: " << ids.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrJoin(*ids, " ") << "\n";
  return 0;
}

int RunDetokenize(const TokenizeFlags& f) {
  auto tok = LoadTokenizer(f.model);
  if (!tok.ok()) {
    std::cerr << "cascade detokenize: " << tok.status().message() << "\n";
    return 1;
  }
  std::vector<int32_t> ids;
  std::string word;
  while (std::cin >> word) {
    int32_t id;
    if (!absl::SimpleAtoi(word, &id) || !(*tok)->IsValid(id)) {
      std::cerr << "cascade detokenize: '" << word << "' is not a token id of this vocabulary (0.."
                << (*tok)->vocab_size() - 1 << ")\n";
      return 1;
    }
    ids.push_back(id);
  }
  std::cout << (*tok)->Decode(ids, f.special);
  std::cout.flush();
  return 0;
}

}  // namespace

void AddTokenize(CLI::App& app, Action* action) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Read UTF-8 text from stdin (exactly as given) and print its token ids");
  cmd->add_option("--model,-m", f->model,
                  "GGUF file, or a folder with tokenizer.json (+ tokenizer_config.json)")
      ->required();
  cmd->add_flag("--no-bos", f->no_bos, "Do not add BOS/EOS");
  cmd->add_flag("--no-parse-special", f->no_parse_special,
                "Treat text like <s> as plain text, not as a control token");
  cmd->callback([f, action] { *action = [f] { return RunTokenize(*f); }; });
}

void AddDetokenize(CLI::App& app, Action* action) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "detokenize", "Read token ids (whitespace-separated) from stdin and print their text");
  cmd->add_option("--model,-m", f->model,
                  "GGUF file, or a folder with tokenizer.json (+ tokenizer_config.json)")
      ->required();
  cmd->add_flag("--special", f->special, "Print control tokens such as <s>");
  cmd->callback([f, action] { *action = [f] { return RunDetokenize(*f); }; });
}

}  // namespace cascade::cli
