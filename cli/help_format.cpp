#include "cli/help_format.h"

#include <string>

#include <CLI/CLI.hpp>

#include "cli/terminal_output.h"

namespace muster::cli {
namespace {

// Where descriptions start: options and commands are named in the columns before.
constexpr size_t kOptionColumns = 26;
constexpr size_t kCommandColumns = 13;

// "  NAME    description, wrapped under itself" with descriptions from column `at`, the
// name alone on its line when too long.
std::string name_and_description(const std::string& name, const std::string& description,
                                 size_t at = kOptionColumns) {
  std::string out = "  " + name;
  if (description.empty()) return out + "\n";
  if (out.size() + 1 > at) out += "\n" + std::string(at, ' ');
  else out += std::string(at - out.size(), ' ');
  return out + wrap_words(description, kColumns, at, at) + "\n";
}

// The value's name without what CLI11 appends of its checks ("INT:NUMBER >= 1" is INT),
// except a set of choices, which is the value's name ("TEXT:{node,slot}" is {node,slot}).
std::string value_name(const std::string& type_name) {
  const size_t choices = type_name.find(":{");
  if (choices != std::string::npos) return type_name.substr(choices + 1, type_name.find('}', choices) - choices);
  return type_name.substr(0, type_name.find(':'));
}

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return name_and_description(make_option_name(opt, is_positional) + make_option_opts(opt),
                                make_option_desc(opt));
  }

  // The value's kind and default; what an option excludes is said by the error that follows.
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() == 0) return out;
    if (!opt->get_type_name().empty()) out += " " + value_name(opt->get_type_name());
    if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    return out;
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return name_and_description(sub->get_display_name(true), sub->get_description(), kCommandColumns);
  }

  std::string make_description(const CLI::App* app) const override {
    const std::string description = app->get_description();
    return description.empty() ? "" : wrap_words(description, kColumns, 0) + "\n";
  }

  std::string make_footer(const CLI::App* app) const override {
    const std::string footer = app->get_footer();
    return footer.empty() ? "" : wrap_words(footer, kColumns, 0) + "\n";
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    return wrap_words(CLI::Formatter::make_usage(app, std::move(name)), kColumns, 4) + "\n";
  }
};

}  // namespace

std::shared_ptr<CLI::Formatter> help_formatter() { return std::make_shared<HelpFormatter>(); }

}  // namespace muster::cli
