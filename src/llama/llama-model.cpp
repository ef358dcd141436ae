#include "llama-chat-template.h"
#include "llama-context.h"
#include "llama-sampler.h"
#include "llama-tokenizer.h"
#include "llama-rpc.h"
#include "llama-util.h"
#include "per-slot-target.h"
#include "rest/llama-model.h"

#include <cstdio>

namespace rest {

namespace {

class llama_loaded_model final : public model {
  public:
    llama_loaded_model(const std::string & path, llama_model_ptr m, const std::string & backend) :
        model_(std::move(m)), tok_(model_.get()), offloaded_(backend != "CPU") {
        const llama_model * mp = model_.get();
        info_.path = path;
        char buf[256] = {};
        llama_model_desc(mp, buf, sizeof(buf));
        info_.description = buf;
        info_.n_params    = llama_model_n_params(mp);
        info_.size_bytes  = llama_model_size(mp);
        info_.n_layer     = llama_model_n_layer(mp);
        info_.n_embd      = llama_model_n_embd(mp);
        info_.n_head      = llama_model_n_head(mp);
        info_.n_head_kv   = llama_model_n_head_kv(mp);
        info_.n_ctx_train = llama_model_n_ctx_train(mp);
        info_.n_vocab     = llama_vocab_n_tokens(llama_model_get_vocab(mp));
        buf[0]            = 0;
        llama_model_meta_val_str(mp, "general.file_type", buf, sizeof(buf));
        info_.file_type = file_type_name(buf[0] ? std::atoi(buf) : -1);
        if (info_.file_type == "unknown") {
            // No general.file_type (e.g. stories260K): llama.cpp guesses it from the tensors and names it last in
            // its description ("llama ?B (guessed) all F32").
            const auto sp   = info_.description.rfind(' ');
            info_.file_type = sp == std::string::npos ? "unknown" : info_.description.substr(sp + 1);
        }
        info_.backend   = backend;
    }

    const model_info & info() const override { return info_; }
    const tokenizer & vocab() const override { return tok_; }
    bool is_eog(token_id t) const override { return llama_vocab_is_eog(llama_model_get_vocab(model_.get()), t); }

    std::unique_ptr<target_model> new_context(const context_params & params) const override {
        const bool quantized = info_.file_type != "F32" && info_.file_type != "F16" && info_.file_type != "BF16";
        const llama_target::hints h{offloaded_, quantized};
        if (!params.per_slot_contexts()) {
            return std::make_unique<llama_target>(model_.get(), params, h);
        }
        context_params one = params;
        one.n_slots        = 1;
        one.n_ctx          = params.n_ctx > 0 ? params.n_ctx / params.n_slots : 0;  // 0: the same default per slot
        std::vector<std::unique_ptr<llama_target>> slots;
        for (std::int32_t k = 0; k < params.n_slots; ++k) {
            slots.push_back(std::make_unique<llama_target>(model_.get(), one, h));
        }
        return std::make_unique<per_slot_target>(std::move(slots));
    }

    std::unique_ptr<token_sampler> new_sampler(const sampler_params & params) const override {
        check_sampler_params(params);  // greedy too: a value no sampler can use is a mistake whichever runs
        if (params.greedy()) {
            return std::make_unique<greedy_sampler>();
        }
        return std::make_unique<llama_chain_sampler>(info_.n_vocab, params);
    }

    std::unique_ptr<chat_template> new_chat_template(const chat_template_params & params) const override {
        return make_llama_chat_template(model_.get(), params);
    }

  private:
    static std::string file_type_name(int ft) {
        switch (ft) {
            case 0:  return "F32";
            case 1:  return "F16";
            case 2:  return "Q4_0";
            case 3:  return "Q4_1";
            case 7:  return "Q8_0";
            case 32: return "BF16";
            case -1: return "unknown";
            default: return "type " + std::to_string(ft);
        }
    }

    llama_model_ptr model_;
    llama_tokenizer tok_;
    model_info      info_;
    bool            offloaded_ = false;  // some layers run on a GPU or an RPC server
};

// Where the layers run, as the cost cache keys it: "CPU", or the devices that take offloaded layers and the layer
// count, e.g. "CUDA0/ngl99" or "RPC0[10.0.0.2:50052]+RPC1[10.0.0.3:50052]/ngl99" (another server, another table).
std::string offload_description(std::int32_t n_gpu_layers) {
    std::string devices;
    for (size_t i = 0; n_gpu_layers != 0 && i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev  = ggml_backend_dev_get(i);
        const auto         type = ggml_backend_dev_type(dev);
        if (type != GGML_BACKEND_DEVICE_TYPE_GPU && type != GGML_BACKEND_DEVICE_TYPE_IGPU) continue;
        const std::string name = ggml_backend_dev_name(dev);
        devices += (devices.empty() ? "" : "+") + name;
        if (name.rfind("RPC", 0) == 0) devices += std::string("[") + ggml_backend_dev_description(dev) + "]";
    }
    return devices.empty() ? "CPU" : devices + "/ngl" + std::to_string(n_gpu_layers);
}

}  // namespace

bool layout_uses_trees(const std::string & layout) {
    if (layout != "auto" && layout != "tree" && layout != "chain") {
        throw user_error("--draft-layout must be auto, tree or chain (got '" + layout + "')");
    }
    return layout == "tree";
}

std::unique_ptr<model> model::load(const std::string & path, std::int32_t n_gpu_layers,
                                   const std::string & rpc_servers) {
    llama_ensure_backend();
    llama_check_gguf_file(path);
    if (!rpc_servers.empty()) {
        const auto endpoints = parse_rpc_servers(rpc_servers);  // a malformed list is an error either way
        if (n_gpu_layers == 0) {
            // Not connected: a connection would hold each server's only client slot for nothing.
            std::fprintf(stderr, "rest: warning: --rpc without -ngl puts no layers on the servers (-ngl 99: all)\n");
        } else {
            llama_add_rpc_servers(endpoints);
        }
    }
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers       = n_gpu_layers;
    llama_model_ptr m(llama_model_load_from_file(path.c_str(), mp));
    if (!m) {
        const std::string why = llama_last_error();
        throw user_error("cannot load model '" + path + "'" + (why.empty() ? std::string() : ": " + why));
    }
    return std::make_unique<llama_loaded_model>(path, std::move(m), offload_description(n_gpu_layers));
}

}  // namespace rest
