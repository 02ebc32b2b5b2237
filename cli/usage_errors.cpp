#include "cli/usage_errors.h"

#include <algorithm>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/cluster/diagnostics.h"
#include "launcher/remote/shell_quote.h"

namespace muster::cli {
namespace {

bool looks_like_option(const std::string& word) {
  // "-1" and "-0.5" are values; "-" alone is standard input or output.
  return word.size() >= 2 && word[0] == '-' && !(word[1] >= '0' && word[1] <= '9');
}

// The name an option word spells: "--json=x" is --json, "-n4" is -n.
std::string option_name(const std::string& word) {
  std::string name = word.substr(0, word.find('='));
  if (name.size() > 2 && name[1] != '-') name = name.substr(0, 2);
  return name;
}

// Whether `word`, an option of `command`, takes the next word as its value.
bool takes_next_word(const CLI::App& command, const std::string& word) {
  if (word.find('=') != std::string::npos) return false;
  if (word.size() > 2 && word[1] != '-') return false;  // -n4
  const CLI::Option* option = command.get_option_no_throw(word);
  return option && option->get_type_size_min() > 0 && option->get_expected_min() > 0;
}

// The words after the subcommand, up to "--".
struct Words {
  int first = 2, end = 2;  // argv[first, end)
};

Words words_before_dashes(int argc, char** argv) {
  Words words;
  while (words.end < argc && std::string(argv[words.end]) != "--") ++words.end;
  return words;
}

// The index of the first word that is an option `command` does not have, or -1.
int first_unknown_option(const CLI::App& command, int argc, char** argv) {
  const Words words = words_before_dashes(argc, argv);
  for (int i = words.first; i < words.end; ++i) {
    const std::string word = argv[i];
    if (!looks_like_option(word)) continue;
    if (!command.get_option_no_throw(option_name(word))) return i;
    if (takes_next_word(command, word)) ++i;
  }
  return -1;
}

// For a command that runs a program: the index of the program's name when it was given
// without "--" (muster run -n 2 ls -l /), the first word that is neither an option nor an
// option's value; or -1.
int command_without_dashes(const CLI::App& command, int argc, char** argv) {
  const CLI::Option* positional = command.get_option_no_throw("command");
  if (!positional || positional->nonpositional()) return -1;
  const Words words = words_before_dashes(argc, argv);
  if (words.end < argc) return -1;  // there is a "--": the words before it are muster's
  for (int i = words.first; i < words.end; ++i) {
    const std::string word = argv[i];
    if (!looks_like_option(word)) return i;
    if (command.get_option_no_throw(option_name(word)) && takes_next_word(command, word)) ++i;
  }
  return -1;
}

// "muster run -n 2 -- ls -l /": the same words, with "--" before the command.
std::string with_dashes(int argc, char** argv, int command_at) {
  std::vector<std::string> words = {"muster"};
  for (int i = 1; i < argc; ++i) {
    if (i == command_at) words.push_back("--");
    const std::string word = argv[i];
    const bool plain = word.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~!") == std::string::npos && !word.empty();
    words.push_back(plain ? word : shell_quote(word));
  }
  return fmt::format("{}", fmt::join(words, " "));
}

// ", did you mean '--json'?" for a mistyped long option, else "".
std::string option_guess(const CLI::App& command, const std::string& typed) {
  if (typed.rfind("--", 0) != 0) return "";  // -l could be any one-letter flag
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options())
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  auto guess = closest_match(typed, names);
  return guess ? fmt::format(", did you mean '{}'?", *guess) : "";
}

// "-f/--cluster": every name of the option CLI11 calls `name`.
std::string spelled(const CLI::App& command, const std::string& name) {
  const CLI::Option* option = command.get_option_no_throw(name);
  if (!option) return name;
  std::vector<std::string> names;
  for (const auto& s : option->get_snames()) names.push_back("-" + s);
  for (const auto& l : option->get_lnames()) names.push_back("--" + l);
  if (names.empty()) return option->get_name();
  return fmt::format("{}", fmt::join(names, "/"));
}

// What is left of CLI11's message after "PREFIX: ".
std::string after_colon(const std::string& text) {
  const size_t colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

// By type: CLI11 names an ExtrasError after the command, not after its kind.
template <typename Kind>
bool is_a(const CLI::ParseError& error) {
  return dynamic_cast<const Kind*>(&error) != nullptr;
}

const CLI::App* subcommand_named(const CLI::App& app, const std::string& name) {
  try {
    return app.get_subcommand(name);
  } catch (const CLI::OptionNotFound&) {
    return nullptr;
  }
}

// "'WORDS'", or what an empty word is: a quote with nothing in it reads as a glitch.
std::string quoted_words(const std::vector<std::string>& words) {
  const std::string joined = fmt::format("{}", fmt::join(words, " "));
  if (!joined.empty()) return "'" + joined + "'";
  return words.size() > 1 ? "of empty words" : "that is an empty word";
}

// CLI11's finding, said as muster says things.
std::string reworded(const CLI::App& command, const CLI::ParseError& error) {
  const std::string what = error.what();
  const std::string full = "muster " + command.get_name();
  if (is_a<CLI::ExtrasError>(error))
    return fmt::format("'{}' takes no argument {}", full, quoted_words(command.remaining()));
  if (is_a<CLI::RequiredError>(error)) {
    // "lists is required": a positional argument nobody gave.
    const std::string name = what.substr(0, what.find(' '));
    const CLI::Option* option = command.get_option_no_throw(name);
    const std::string described = option ? option->get_description() : name;
    return fmt::format("'{}' needs {}", full, described);
  }
  if (is_a<CLI::ArgumentMismatch>(error)) {
    const std::string name = what.substr(0, what.find(':'));
    // "--count: 1 required INT:INT in [1 - 100000] missing": a flag without its value.
    if (what.find(" missing") != std::string::npos)
      return fmt::format("{} needs a value after it", spelled(command, name));
    // "--np: At Most 1 required but received 2": the flag twice.
    if (what.find("At Most") != std::string::npos)
      return fmt::format("{} is given more than once; give it once", spelled(command, name));
  }
  if (is_a<CLI::ExcludesError>(error)) {
    // "--fold excludes --no-prefix"
    const size_t at = what.find(" excludes ");
    if (at != std::string::npos)
      return fmt::format("{} and {} cannot be used together", what.substr(0, at), what.substr(at + 10));
  }
  if (is_a<CLI::ConversionError>(error)) {
    // "The value 1.5 is not an allowed value for --count", "Could not convert: --count = x"
    return fmt::format("{}: not a value it takes", after_colon(what));
  }
  return what;
}

}  // namespace

std::string explain_unknown_command(const std::string& typed, const std::vector<std::string>& commands) {
  if (typed.empty())
    return fmt::format("the command is an empty word; the commands are {}", fmt::join(commands, ", "));
  auto guess = closest_match(typed, commands);
  if (guess) return fmt::format("'{}' is not a muster command, did you mean '{}'?", typed, *guess);
  return fmt::format("'{}' is not a muster command; the commands are {}", typed, fmt::join(commands, ", "));
}

std::optional<std::string> misspelt_top_option(const std::string& typed) {
  if (typed.rfind("--", 0) != 0) return std::nullopt;  // -v could be any one-letter flag
  if (auto guess = closest_match(typed.substr(0, typed.find('=')), {"--help", "--version"}))
    return fmt::format("unknown option '{}', did you mean '{}'?", typed, *guess);
  return std::nullopt;
}

std::optional<std::string> habit_to_correct(const CLI::App& app, int argc, char** argv) {
  const CLI::App* command = argc > 1 ? subcommand_named(app, argv[1]) : nullptr;
  if (!command) return std::nullopt;
  const int program = command_without_dashes(*command, argc, argv);
  // mpirun's -np: CLI11 would read it as -n with the value "p".
  for (int i = 2; i < (program >= 0 ? program : words_before_dashes(argc, argv).end); ++i) {
    const std::string word = argv[i];
    if (word.size() > 2 && word[0] == '-' && word[1] != '-' && word.find('=') == std::string::npos &&
        command->get_option_no_throw("-" + word) && looks_like_option(word))
      return fmt::format("'{}' is mpirun's spelling; muster's is '{}' or '-{}', as in 'muster {} -{} 4'",
                         word, "-" + word, word.substr(1, 1), command->get_name(), word);
  }
  // mpirun's and srun's habit: the command straight after the flags. Its own options would
  // be taken for muster's (ls -l, hostname -f, df -h), so say where it goes instead. A word
  // unknown before the command is a mistyped flag, said as such by the parse.
  const int unknown = first_unknown_option(*command, argc, argv);
  if (program < 0 || (unknown >= 0 && unknown < program)) return std::nullopt;
  for (int i = program + 1; i < argc; ++i)
    if (looks_like_option(argv[i]))
      return fmt::format("put the command after --: {}", with_dashes(argc, argv, program));
  return std::nullopt;
}

std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error, int argc,
                                char** argv, const std::vector<std::string>& commands) {
  const auto parsed = app.get_subcommands();
  if (parsed.empty()) return explain_unknown_command(argc > 1 ? argv[1] : "", commands);
  const CLI::App& command = *parsed.front();
  const std::string name = command.get_name();
  const std::string see = fmt::format("; see 'muster {} --help'", name);

  const int unknown = first_unknown_option(command, argc, argv);
  if (unknown >= 0) {
    const std::string typed = option_name(argv[unknown]);
    // nodeset's -f: muster's -f is the cluster file in every command.
    if (typed == "-f" && command.get_option_no_throw("--fold"))
      return fmt::format("'muster {}' has no -f, which is the cluster file in muster; fold with --fold", name);
    const std::string guess = option_guess(command, typed);
    return fmt::format("unknown option '{}' for 'muster {}'{}", typed, name, guess.empty() ? see : guess);
  }
  return reworded(command, error) + see;
}

}  // namespace muster::cli
