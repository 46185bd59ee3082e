//! The `Serialize` and `Deserialize` derives of `tessera-sdk`'s prelude: serde's own derives,
//! run through the serde the SDK re-exports, so that an entity crate depends on `tessera-sdk`
//! alone. serde's derive names the crate `serde` unless told otherwise (`E0463 can't find crate
//! serde` in a crate without that dependency); these derives hand serde a private copy of the
//! type marked `#[serde(crate = "tessera_sdk::serde", remote = "<the type>")]` and implement the
//! trait on the type through it. Every `#[serde(...)]` attribute keeps its meaning. Use them
//! through `tessera_sdk::prelude::*` (or `tessera_sdk::{Serialize, Deserialize}`).

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Attribute, Data, DeriveInput, Fields, parse_macro_input};

/// serde's `Serialize` derive through `tessera_sdk::serde`.
#[proc_macro_derive(Serialize, attributes(serde))]
pub fn derive_serialize(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input, Trait::Serialize)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// serde's `Deserialize` derive through `tessera_sdk::serde`.
#[proc_macro_derive(Deserialize, attributes(serde))]
pub fn derive_deserialize(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input, Trait::Deserialize)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

#[derive(Clone, Copy)]
enum Trait {
    Serialize,
    Deserialize,
}

fn expand(input: &DeriveInput, which: Trait) -> syn::Result<Tokens> {
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "tessera_sdk's derives take types without generic parameters; for a generic type use \
             serde's derive through the SDK: #[derive(tessera_sdk::serde::Serialize)] with \
             #[serde(crate = \"tessera_sdk::serde\")]",
        ));
    }
    let name = &input.ident;
    let shadow_name = format_ident!("__TesseraSerde{}", name);
    let shadow = shadow(input, &shadow_name)?;
    let remote = name.to_string();
    let expanded = match which {
        Trait::Serialize => quote! {
            #[doc(hidden)]
            const _: () = {
                #[derive(tessera_sdk::serde::Serialize)]
                #[serde(crate = "tessera_sdk::serde", remote = #remote)]
                #shadow
                impl tessera_sdk::serde::Serialize for #name {
                    fn serialize<__S: tessera_sdk::serde::Serializer>(
                        &self,
                        serializer: __S,
                    ) -> ::core::result::Result<__S::Ok, __S::Error> {
                        #shadow_name::serialize(self, serializer)
                    }
                }
            };
        },
        Trait::Deserialize => quote! {
            #[doc(hidden)]
            const _: () = {
                #[derive(tessera_sdk::serde::Deserialize)]
                #[serde(crate = "tessera_sdk::serde", remote = #remote)]
                #shadow
                impl<'de> tessera_sdk::serde::Deserialize<'de> for #name {
                    fn deserialize<__D: tessera_sdk::serde::Deserializer<'de>>(
                        deserializer: __D,
                    ) -> ::core::result::Result<Self, __D::Error> {
                        #shadow_name::deserialize(deserializer)
                    }
                }
            };
        },
    };
    Ok(expanded)
}

/// A private copy of the type, named `shadow_name`, with only its `#[serde]` attributes (on
/// the type, its variants and its fields): what serde's derive is run on.
fn shadow(input: &DeriveInput, shadow_name: &syn::Ident) -> syn::Result<Tokens> {
    let mut copy = input.clone();
    copy.ident = shadow_name.clone();
    copy.vis = syn::Visibility::Inherited;
    keep_serde(&mut copy.attrs);
    match &mut copy.data {
        Data::Struct(data) => keep_serde_on_fields(&mut data.fields),
        Data::Enum(data) => {
            for variant in &mut data.variants {
                keep_serde(&mut variant.attrs);
                keep_serde_on_fields(&mut variant.fields);
            }
        }
        Data::Union(data) => {
            return Err(syn::Error::new_spanned(
                data.union_token,
                "serde does not derive for unions",
            ));
        }
    }
    Ok(quote! { #[allow(dead_code, non_camel_case_types)] #copy })
}

fn keep_serde(attrs: &mut Vec<Attribute>) {
    attrs.retain(|attr| attr.path().is_ident("serde"));
}

fn keep_serde_on_fields(fields: &mut Fields) {
    for field in fields.iter_mut() {
        keep_serde(&mut field.attrs);
        field.vis = syn::Visibility::Inherited;
    }
}
