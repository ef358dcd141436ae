#include "corpus-reader.h"

#include "rest/types.h"

#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

namespace rest {

namespace fs = std::filesystem;
using json   = nlohmann::json;

namespace {

bool matches_include(const std::string & name, const std::vector<std::string> & include) {
    if (include.empty()) {
        return true;
    }
    return std::any_of(include.begin(), include.end(),
                       [&](const std::string & g) { return ::fnmatch(g.c_str(), name.c_str(), 0) == 0; });
}

// nlohmann's what() starts with "[json.exception.parse_error.101] "; the rest is the useful part.
std::string json_error_text(const std::exception & e) {
    std::string s = e.what();
    if (s.rfind("[json.exception.", 0) == 0) {
        const std::size_t p = s.find("] ");
        if (p != std::string::npos) {
            s = s.substr(p + 2);
        }
    }
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
}

// Follows a dotted path ("a.b.0") through objects and arrays. nullptr when a step is missing.
const json * follow(const json & j, const std::string & path) {
    const json * cur = &j;
    std::size_t  start = 0;
    while (start <= path.size()) {
        const std::size_t dot  = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (cur->is_object()) {
            auto it = cur->find(part);
            if (it == cur->end()) {
                return nullptr;
            }
            cur = &*it;
        } else if (cur->is_array() && !part.empty() &&
                   std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            const std::size_t i = std::stoul(part);
            if (i >= cur->size()) {
                return nullptr;
            }
            cur = &(*cur)[i];
        } else {
            return nullptr;
        }
        if (dot == std::string::npos) {
            break;
        }
        start = dot + 1;
    }
    return cur;
}

std::string string_field(const json & msg, const char * key, const std::string & where) {
    auto it = msg.find(key);
    if (it == msg.end()) {
        throw user_error(where + ": chat message has no '" + key + "'");
    }
    if (it->is_string()) {
        return it->get<std::string>();
    }
    // OpenAI content parts: [{"type": "text", "text": "..."}, ...]
    if (it->is_array()) {
        std::string out;
        for (const json & part : *it) {
            if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                part["text"].is_string()) {
                out += part["text"].get<std::string>();
            }
        }
        return out;
    }
    throw user_error(where + ": chat message '" + key + "' is " + it->type_name() + ", expected a string");
}

std::string chat_role(const std::string & from, const std::string & where) {
    if (from == "human" || from == "user") {
        return "user";
    }
    if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "bard" || from == "bing" ||
        from == "model") {
        return "assistant";
    }
    if (from == "system" || from == "tool") {
        return from;
    }
    throw user_error(where + ": unknown chat role '" + from + "'");
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
    const auto *      s = reinterpret_cast<const unsigned char *>(text.data());
    const std::size_t n = text.size();
    std::size_t       i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        int           len;
        std::uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp  = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp  = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp  = c & 0x07;
        } else {
            return i;
        }
        if (i + len > n) {
            return i;
        }
        for (int k = 1; k < len; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return i;
            }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
            return i;
        }
        i += len;
    }
    return std::string_view::npos;
}

std::vector<corpus_file> list_corpus_files(const std::vector<std::string> & inputs, const corpus_params & params) {
    std::vector<corpus_file> out;
    for (const std::string & in : inputs) {
        if (in == "-") {
            out.push_back({"-", 0});
            continue;
        }
        std::error_code ec;
        const fs::file_status st = fs::status(in, ec);
        if (ec || !fs::exists(st)) {
            throw user_error("cannot read input '" + in + "': " +
                             (ec ? ec.message() : std::string("No such file or directory")));
        }
        if (fs::is_character_file(st) || fs::is_block_file(st)) {
            // Read whole before any check, /dev/zero grew by 250 MB/s until memory ran out.
            throw user_error("input '" + in + "' is a device, not a file");
        }
        if (fs::is_directory(st)) {
            std::vector<corpus_file> found;
            fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec), end;
            if (ec) {
                throw user_error("cannot read directory '" + in + "': " + ec.message());
            }
            for (; it != end; it.increment(ec)) {
                if (ec) {
                    throw user_error("cannot walk directory '" + in + "': " + ec.message());
                }
                std::error_code fec;
                if (!it->is_regular_file(fec) || !matches_include(it->path().filename().string(), params.include)) {
                    continue;
                }
                found.push_back({it->path().string(), static_cast<std::uint64_t>(it->file_size(fec))});
            }
            std::sort(found.begin(), found.end(),
                      [](const corpus_file & a, const corpus_file & b) { return a.path < b.path; });
            out.insert(out.end(), found.begin(), found.end());
        } else {
            out.push_back({in, static_cast<std::uint64_t>(fs::file_size(in, ec))});
        }
    }
    return out;
}

corpus_reader::corpus_reader(std::vector<corpus_file> files, const corpus_params & params, const tokenizer & tok,
                             std::function<void(const std::string &)> on_warning) :
    files_(std::move(files)), params_(params), tok_(tok), on_warning_(std::move(on_warning)) {
    if (params_.format == corpus_format::jsonl && params_.fields.empty()) {
        params_.fields = {"text"};
    }
}

corpus_reader::~corpus_reader() = default;

std::string corpus_reader::read_whole(const corpus_file & f) {
    if (f.path == "-") {
        std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        if (std::cin.bad()) {
            throw user_error("cannot read stdin");
        }
        return s;
    }
    std::ifstream in(f.path, std::ios::binary);
    if (!in) {
        throw user_error("cannot read input '" + f.path + "': " + std::strerror(errno));
    }
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
        throw user_error("cannot read input '" + f.path + "': read error");
    }
    return s;
}

void corpus_reader::add_text_file(const std::string & content, std::vector<corpus_document> & out,
                                  std::size_t & added) {
    if (!params_.split_paragraphs) {
        if (!content.empty()) {
            added += content.size();
            out.push_back({content, false});
        }
        return;
    }
    // Paragraphs: maximal runs of lines that are not blank (whitespace only).
    std::string para;
    std::size_t pos = 0;
    auto        flush = [&]() {
        if (!para.empty()) {
            added += para.size();
            out.push_back({std::move(para), false});
            para.clear();
        }
    };
    while (pos < content.size()) {
        std::size_t nl = content.find('\n', pos);
        const std::size_t end = nl == std::string::npos ? content.size() : nl + 1;
        const std::string_view line(content.data() + pos, end - pos);
        if (line.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos) {
            flush();
        } else {
            para.append(line);
        }
        pos = end;
    }
    flush();
}

void corpus_reader::add_line(const std::string & line, std::vector<corpus_document> & out, std::size_t & added) {
    const std::string where = in_path_ + ":" + std::to_string(line_no_);
    json              rec;
    try {
        rec = json::parse(line);
    } catch (const json::exception & e) {
        throw user_error(where + ": invalid JSON: " + json_error_text(e));
    }
    add_record(rec, where, out, added);
}

void corpus_reader::add_record(const nlohmann::json & rec, const std::string & where,
                               std::vector<corpus_document> & out, std::size_t & added) {
    corpus_document doc;
    if (params_.format == corpus_format::jsonl) {
        for (const std::string & field : params_.fields) {
            const json * v = follow(rec, field);
            if (!v || v->is_null()) {
                throw user_error(where + ": record has no field '" + field + "'");
            }
            auto take = [&](const json & s) {
                if (!s.is_string()) {
                    throw user_error(where + ": field '" + field + "' holds " + s.type_name() +
                                     ", expected a string, a list of strings or a list of token ids");
                }
                if (doc.pretokenized) {
                    throw user_error(where + ": field '" + field + "' holds text but another field holds token ids");
                }
                if (!doc.text.empty()) {
                    doc.text += '\n';
                }
                doc.text += s.get_ref<const std::string &>();
            };
            if (v->is_array() && !v->empty() && v->front().is_number_integer()) {
                // Token ids: a pre-tokenized document (e.g. a model's own output from `rest generate --json`), taken
                // as is, so the datastore holds exactly these tokens rather than a re-tokenization of their text.
                if (!doc.text.empty()) {
                    throw user_error(where + ": field '" + field + "' holds token ids but other fields hold text");
                }
                const std::int64_t n_vocab = tok_.n_vocab();
                for (const json & t : *v) {
                    const std::int64_t id = t.is_number_integer() ? t.get<std::int64_t>() : -1;
                    if (id < 0 || id >= n_vocab) {
                        throw user_error(where + ": field '" + field + "' holds " + t.dump() +
                                         ", expected token ids in [0, " + std::to_string(n_vocab) + ")");
                    }
                    doc.tokens.push_back((token_id) id);
                }
                doc.pretokenized = true;
                added += doc.tokens.size() * sizeof(token_id);
            } else if (v->is_array()) {
                for (const json & s : *v) {
                    take(s);
                }
            } else {
                take(*v);
            }
        }
    } else {
        std::vector<chat_message> msgs;
        if (rec.is_object() && rec.contains("conversations") && rec["conversations"].is_array()) {
            for (const json & m : rec["conversations"]) {
                if (!m.is_object()) {
                    throw user_error(where + ": 'conversations' holds a " + m.type_name() + ", expected objects");
                }
                msgs.push_back({chat_role(string_field(m, "from", where), where), string_field(m, "value", where)});
            }
        } else if (rec.is_object() && rec.contains("messages") && rec["messages"].is_array()) {
            for (const json & m : rec["messages"]) {
                if (!m.is_object()) {
                    throw user_error(where + ": 'messages' holds a " + m.type_name() + ", expected objects");
                }
                msgs.push_back({chat_role(string_field(m, "role", where), where), string_field(m, "content", where)});
            }
        } else {
            throw user_error(where + ": expected a chat record with 'conversations' (ShareGPT) or 'messages' (OpenAI)");
        }
        if (msgs.empty()) {
            return;
        }
        doc.text          = tok_.apply_chat_template(msgs, false);
        doc.parse_special = true;
    }
    if (doc.pretokenized) {
        out.push_back(std::move(doc));  // (counted in `added` as it was read)
    } else if (!doc.text.empty()) {
        added += doc.text.size();
        out.push_back(std::move(doc));
    }
}

bool corpus_reader::next(std::vector<corpus_document> & out, std::size_t max_bytes) {
    const std::size_t n_before = out.size();
    std::size_t       added    = 0;
    while (added < max_bytes) {
        if (in_) {
            std::string line;
            if (std::getline(*in_, line)) {
                ++line_no_;
                bytes_read_ += line.size() + 1;
                if (line.find_first_not_of(" \t\r\n") != std::string::npos) {
                    add_line(line, out, added);
                }
                continue;
            }
            if (in_->bad()) {
                throw user_error("cannot read '" + in_path_ + "' after line " + std::to_string(line_no_));
            }
            in_ = nullptr;
            in_file_.reset();
            continue;
        }
        if (next_file_ >= files_.size()) {
            break;
        }
        const corpus_file f = files_[next_file_++];
        ++n_files_;
        in_path_ = f.path == "-" ? "<stdin>" : f.path;
        if (params_.format == corpus_format::text) {
            const std::string content = read_whole(f);
            bytes_read_ += content.size();
            const std::size_t nul = content.find('\0');
            const std::size_t bad = nul == std::string::npos ? find_invalid_utf8(content) : std::string::npos;
            if (nul != std::string::npos || bad != std::string::npos) {
                ++n_skipped_;
                if (on_warning_) {
                    on_warning_("skipping '" + in_path_ + "': " +
                                (nul != std::string::npos ? "binary (NUL byte at offset " + std::to_string(nul) + ")"
                                                          : "invalid UTF-8 at byte " + std::to_string(bad)));
                }
                continue;
            }
            add_text_file(content, out, added);
            continue;
        }
        // JSONL or a JSON array of records. Peek the first non-blank byte to tell them apart.
        if (f.path == "-") {
            in_file_.reset();
            in_ = &std::cin;
        } else {
            in_file_ = std::make_unique<std::ifstream>(f.path, std::ios::binary);
            if (!*in_file_) {
                throw user_error("cannot read input '" + f.path + "': " + std::strerror(errno));
            }
            in_ = in_file_.get();
        }
        line_no_ = 0;
        while (std::isspace(in_->peek())) {
            if (in_->get() == '\n') {
                ++line_no_;
            }
        }
        if (in_->peek() == '[') {
            std::string content((std::istreambuf_iterator<char>(*in_)), std::istreambuf_iterator<char>());
            in_ = nullptr;
            in_file_.reset();
            bytes_read_ += content.size();
            json arr;
            try {
                arr = json::parse(content);
            } catch (const json::exception & e) {
                throw user_error(in_path_ + ": invalid JSON: " + json_error_text(e));
            }
            if (!arr.is_array()) {
                throw user_error(in_path_ + ": expected a JSON array of records or one record per line");
            }
            for (std::size_t i = 0; i < arr.size(); ++i) {
                add_record(arr[i], in_path_ + ": record " + std::to_string(i + 1), out, added);
            }
        } else {
            in_->clear();
        }
    }
    return out.size() > n_before || added > 0 || next_file_ < files_.size() || in_ != nullptr;
}

}  // namespace rest
